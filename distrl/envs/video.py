"""Video of an evaluation episode: :class:`RecordEpisode` writes the first episode of the env it
wraps to an mp4 file, frame by frame (``distrl eval --video``).

Frames come from the env's own renderer (``render_mode="rgb_array"``: classic control through
pygame, MuJoCo through its GL backend, Atari's screen) or, for an env that renders none worth
watching, from the observation itself (:func:`grid_frame`: MinAtar's ``[C, 10, 10]`` channels, each
a colour, scaled up; the package's own ``rgb_array`` needs seaborn for a palette). They are written
through OpenCV (``opencv-python-headless``, the ``atari`` and ``video`` extras): its wheel bundles
FFmpeg, where gymnasium's ``RecordVideo`` needs moviepy and imageio needs imageio-ffmpeg or PyAV.
Frames go to the file as they come, so a 27k-step Atari game does not sit in memory.
"""

from __future__ import annotations

import colorsys
from pathlib import Path
from typing import Optional

import gymnasium as gym
import numpy as np

#: the side of one MinAtar cell in a video frame, in pixels
CELL_PIXELS = 16
#: frames per second of a video whose env states none (MinAtar: a game a person can follow)
DEFAULT_FPS = 10.0


def open_writer(path: Path, fps: float, width: int, height: int):
    """An OpenCV mp4 writer (MPEG-4 Part 2, ``mp4v``), or ``ValueError`` in one line when OpenCV is
    missing or cannot write mp4 here."""
    try:
        import cv2
    except ImportError:
        raise ValueError('--video writes mp4 through OpenCV: pip install -e ".[video]" in the checkout') from None
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (width, height))
    if not writer.isOpened():
        raise ValueError(f"OpenCV cannot write {path} (mp4v): its build lacks FFmpeg")
    return writer


def grid_frame(obs: np.ndarray, cell: int = CELL_PIXELS) -> np.ndarray:
    """A ``uint8 [H * cell, W * cell, 3]`` picture of a grid observation ``[C, H, W]`` (bool or 0/1):
    black where no channel is set, else the colour of the last set channel (one hue per channel)."""
    obs = np.asarray(obs)
    c = obs.shape[0]
    palette = np.array(
        [(0, 0, 0)] + [tuple(int(255 * v) for v in colorsys.hsv_to_rgb(i / c, 0.8, 1.0)) for i in range(c)],
        dtype=np.uint8,
    )
    index = np.max((obs > 0) * np.arange(1, c + 1).reshape(c, 1, 1), axis=0)  # [H, W]: 0 empty, else channel + 1
    return np.repeat(np.repeat(palette[index], cell, axis=0), cell, axis=1)


class RecordEpisode(gym.Wrapper):
    """Writes the first episode played after construction to ``path`` (mp4), then records nothing.

    Frames: ``env.render()`` when the env was made with ``render_mode="rgb_array"``, else
    :func:`grid_frame` of the observation (which must then be a grid ``[C, H, W]``). One frame for the
    reset and one per step, the last one the state the episode ended in.
    """

    def __init__(self, env: gym.Env, path: str | Path, fps: float):
        super().__init__(env)
        self.path, self.fps = Path(path), fps
        self._writer = None
        self._done = False  # the episode has been written

    def _frame(self, obs) -> np.ndarray:
        if self.env.render_mode == "rgb_array":
            return np.asarray(self.env.render())
        return grid_frame(obs)

    def _write(self, obs) -> None:
        import cv2  # open_writer has checked it is there

        frame = self._frame(obs)
        if self._writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = open_writer(self.path, self.fps, frame.shape[1], frame.shape[0])
        self._writer.write(cv2.cvtColor(np.ascontiguousarray(frame, dtype=np.uint8), cv2.COLOR_RGB2BGR))

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        if not self._done and self._writer is None:
            self._write(obs)
        return obs, info

    def step(self, action):
        obs, reward, term, trunc, info = self.env.step(action)
        if self._writer is not None:
            self._write(obs)
            if term or trunc:
                self._finish()
        return obs, reward, term, trunc, info

    def _finish(self) -> None:
        self._writer.release()
        self._writer, self._done = None, True

    def close(self) -> None:
        if self._writer is not None:  # an episode cut short (an error, a limit): keep what was played
            self._finish()
        super().close()


def render_mode(env_id: str) -> Optional[str]:
    """The ``render_mode`` to make ``env_id`` with for a video: ``None`` for MinAtar (frames from its
    observation, :func:`grid_frame`), ``"rgb_array"`` for every other env."""
    return None if env_id.startswith("MinAtar/") else "rgb_array"
