"""Frame stacks streamed one new frame per step: what SEED's env workers send instead of the stack.

An Atari observation ``[K, H, W]`` is the last ``K`` frames, so from one step to the next only its
newest frame is new: ``obs_t[:-1] == obs_{t-1}[1:]`` within an episode. A worker that sends a
group's observations every step (SEED's ``infer`` request) sends ``K`` times the bytes it must.
:class:`StackSender` sends the newest frame of every env and, for an env whose stack is not the
last one shifted by a frame (its first step, a reset), the whole stack; :class:`StackReceiver`
rebuilds the stacks exactly. The same for the true final observations of envs whose episode just
ended (``final [D, K, H, W]``: the ended envs' last stacks shifted, plus their final frames).

The check is on the data, not on what the env promises: the stream is lossless for any
observation (a non-stacked image would simply cross whole), and sender and receiver stay in step
as long as every message is decoded once, in order; a restarted group starts a new stream (its
first message sends every stack whole). Neither TorchRL nor tensordict has such a codec (a
``TensorDict`` crosses as it is).

Keys of a message: ``frame [B, H, W]``, ``full [R, K, H, W]`` at ``full_index [R]`` (int64), and
``final_frame [D, H, W]``, ``final_full [Q, K, H, W]`` at ``final_full_index [Q]`` (indices into the
``D`` ended envs, in env order).
"""

from __future__ import annotations

from typing import Optional

import torch

FRAME, FULL, FULL_INDEX = "frame", "full", "full_index"
FINAL_FRAME, FINAL_FULL, FINAL_FULL_INDEX = "final_frame", "final_full", "final_full_index"
KEYS = (FRAME, FULL, FULL_INDEX, FINAL_FRAME, FINAL_FULL, FINAL_FULL_INDEX)


def _shifted(prev: torch.Tensor, frame: torch.Tensor) -> torch.Tensor:
    """``prev [N, K, H, W]`` moved one frame on, ``frame [N, H, W]`` last."""
    return torch.cat([prev[:, 1:], frame.unsqueeze(1)], dim=1)


def _split(stacks: torch.Tensor, prev: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(frames [N, H, W], full [R, K, H, W], full_index [R])``: the stacks that are not ``prev``
    shifted by their newest frame go whole (all of them when there is no ``prev``)."""
    if prev is None:
        index = torch.arange(len(stacks))
    else:
        index = (stacks[:, :-1] != prev[:, 1:]).flatten(1).any(1).nonzero().squeeze(1)
    # copies, never views: rpc pickles a view's storage offset, and an empty view's offset lies
    # outside its (empty) storage, which the receiver refuses
    return stacks[:, -1].clone(), stacks[index].clone(), index


class StackSender:
    """One group's sending end; :meth:`encode` once per step, in order."""

    def __init__(self):
        self.prev: Optional[torch.Tensor] = None  # [B, K, H, W]: the stacks of the last message

    def reset(self) -> None:
        """The group starts over (a new env): the next message sends every stack whole."""
        self.prev = None

    def encode(self, obs: torch.Tensor, done: torch.Tensor, final: torch.Tensor) -> dict[str, torch.Tensor]:
        """``obs [B, K, H, W]``, ``done [B]`` (the step that gave ``obs`` ended those envs'
        episodes), ``final [D, K, H, W]`` (their true last stacks) -> the message's frame keys."""
        frame, full, index = _split(obs, self.prev)
        prev_done = None if self.prev is None else self.prev[done]
        final_frame, final_full, final_index = _split(final, prev_done)
        self.prev = obs
        return {
            FRAME: frame,
            FULL: full,
            FULL_INDEX: index,
            FINAL_FRAME: final_frame,
            FINAL_FULL: final_full,
            FINAL_FULL_INDEX: final_index,
        }


class StackReceiver:
    """One group's receiving end; :meth:`decode` every message of its stream once, in order."""

    def __init__(self):
        self.prev: Optional[torch.Tensor] = None

    def decode(self, msg, done: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(obs [B, K, H, W], final [D, K, H, W])`` from a message made by :meth:`StackSender.encode`
        (``msg``: a mapping with its keys; ``done [B]`` as sent). ``ValueError`` if the message does not
        continue this stream (a first message must send every stack whole)."""
        frame, full, index = msg[FRAME], msg[FULL], msg[FULL_INDEX].long()
        if self.prev is None:
            if len(index) != len(frame):
                raise ValueError(f"a stream's first message must send all {len(frame)} stacks whole, got {len(index)}")
            obs = full.clone()
            final = msg[FINAL_FULL].clone()
        else:
            if self.prev.shape[0] != frame.shape[0] or self.prev.shape[2:] != frame.shape[1:]:
                raise ValueError(f"frames {tuple(frame.shape)} do not continue stacks {tuple(self.prev.shape)}")
            obs = _shifted(self.prev, frame)
            obs[index] = full
            final = _shifted(self.prev[done], msg[FINAL_FRAME])
            final[msg[FINAL_FULL_INDEX].long()] = msg[FINAL_FULL]
        self.prev = obs
        return obs, final
