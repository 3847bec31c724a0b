"""The learner's book-keeping, shared by every recipe: counters, episode returns, policy lag,
the stop rule, progress lines, metric rows and ``summary.json``.

Only the learner rank owns a tracker (design rule 3); other roles send their statistics to it
inside the messages they already exchange.
"""

from __future__ import annotations

import collections
import json
import math
import time
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

import torch

from distrl.config import Config
from distrl.envs.atari import frame_skip
from distrl.logging.metrics import MetricsWriter
from distrl.logging.timing import BudgetBook
from distrl.runtime.job import write_private


def _duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``2h10m``: an estimate, so no more digits than it deserves."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class RunTracker:
    """Counts frames, episodes, updates and policy lag; decides when to stop; reports."""

    def __init__(
        self, cfg: Config, run_dir: Path, roles: Mapping[int, str], writer: Optional[MetricsWriter], name: str = ""
    ):
        self.cfg, self.run_dir, self.roles, self.writer = cfg, Path(run_dir), dict(roles), writer
        self.name = name or str(cfg.recipe)  #: the recipe's short name, the progress line's prefix
        #: frames the learner trained on (the stop rule's, the rates' and summary.json's frames);
        #: frames it received and did not train on are counted apart, in ``frames_dropped``
        self.env_frames = 0
        self.frames_dropped = 0
        self.episodes = 0
        self.updates = 0
        self.returns: collections.deque[float] = collections.deque(maxlen=100)
        self.lag_sum = 0.0
        self.lag_count = 0
        self.lag_max = 0
        self.lag_hist: collections.Counter[int] = collections.Counter()
        self.counters: collections.Counter[str] = collections.Counter()  # dropped, rejected, ...
        self.lost: dict[int, dict] = {}  # rank -> when and why it was declared lost
        self.elapsed_before = 0.0  # wall time of earlier runs of a resumed job
        self.start = time.monotonic()
        self._last_report = self.start
        self._frames_at_report = 0
        self._frames_at_start = 0  # frames of earlier runs of a resumed job (the rate is this run's)
        # a resumed run's metric rows go on from the restored step: the ones an earlier run wrote
        # past it are rewound before this run's first row (MetricsWriter.rewind)
        self._rewind_metrics = cfg.run.resume
        # (time, trained frames) at this run's first and latest batch: the running rate excludes
        # the start-up (processes, envs, first resets) and the first batch, as TorchRL's
        # collectors are measured after their first batch (experiments/kit/torchrl_layouts.py)
        self._first_frames: Optional[tuple[float, int]] = None
        self._last_frames: Optional[tuple[float, int]] = None
        self._window: dict[str, list[float]] = collections.defaultdict(list)
        # Learning that holds (docs/concepts.md): when the training mean first reached the target,
        # the lowest it fell to afterwards, and every greedy evaluation with the best of them.
        self.target_reached: Optional[dict[str, float]] = None  # {"wall_s", "env_frames"}
        self.min_return_after_target: Optional[float] = None
        self.evals: list[dict[str, float]] = []  # {"wall_s", "env_frames", "updates", "return_mean"}
        self.best_eval: Optional[dict[str, float]] = None
        #: where each role's time goes (distrl/logging/timing.py); the learner's session fills it
        self.budget_book = BudgetBook(roles)

    # ---- counting -------------------------------------------------------------------------
    def count(self, name: str, n: int = 1) -> int:
        """Add ``n`` to counter ``name`` (``summary.json``'s ``counters``, the ``learner/NAME`` metric);
        the new total."""
        self.counters[name] += int(n)
        return self.counters[name]

    def set_count(self, name: str, total: int) -> None:
        """Counter ``name`` to ``total``: a count another object keeps (SF's reclaimed slots)."""
        self.counters[name] = int(total)

    def add_frames(self, n: int) -> None:
        """``n`` frames the learner trains on: a batch it cut (impala, seed, sf), a gradient it
        applied (a3c), a rollout it learned from (vecenv), transitions stored in its replay (apex)."""
        self.env_frames += int(n)
        self._last_frames = (time.monotonic(), self.env_frames)
        if self._first_frames is None:
            self._first_frames = self._last_frames

    def drop_frames(self, n: int) -> None:
        """``n`` frames the learner received and did not train on (rows past sf's lag cap, a
        gradient past A3C's staleness cap): in ``summary.json``'s ``frames_dropped``, never in
        ``env_frames`` or the rates."""
        self.frames_dropped += int(n)

    def add_episodes(self, returns: Iterable[float]) -> None:
        target = self.cfg.run.target_return
        for r in returns:
            self.returns.append(float(r))
            self.episodes += 1
            if target is None or len(self.returns) < 100:
                continue
            mean = self.return_mean_100
            if self.target_reached is None and mean >= target:
                self.target_reached = {"wall_s": round(self.wall_s, 3), "env_frames": self.env_frames}
            if self.target_reached is not None:
                low = self.min_return_after_target
                self.min_return_after_target = mean if low is None else min(low, mean)

    def add_eval(self, returns: list[float]) -> bool:
        """Record a greedy evaluation of the current policy; True when it is the best so far (ties
        go to the later policy, which has trained longer)."""
        row = {
            "wall_s": round(self.wall_s, 3),
            "env_frames": self.env_frames,
            "updates": self.updates,
            "return_mean": sum(returns) / len(returns),
        }
        self.evals.append(row)
        self.observe({"eval/return_mean": row["return_mean"]})
        if self.best_eval is None or row["return_mean"] >= self.best_eval["return_mean"]:
            self.best_eval = row
            return True
        return False

    def add_lag(self, lag: torch.Tensor) -> None:
        """Record the policy lag (in learner updates) of every sample of a batch."""
        lag = lag.reshape(-1).to("cpu", torch.int64)
        self.lag_sum += float(lag.sum())
        self.lag_count += lag.numel()
        self.lag_max = max(self.lag_max, int(lag.max()))
        values, counts = torch.unique(lag, return_counts=True)
        self.lag_hist.update(dict(zip(values.tolist(), counts.tolist())))

    def observe(self, metrics: Mapping[str, float]) -> None:
        """Add values to the current reporting window; each row logs their mean."""
        for k, v in metrics.items():
            self._window[k].append(float(v))

    # ---- derived --------------------------------------------------------------------------
    @property
    def wall_s(self) -> float:
        return self.elapsed_before + time.monotonic() - self.start

    @property
    def fps_running(self) -> Optional[float]:
        """Trained frames/s from this run's first batch to its latest: the start-up, the first
        batch and the wind-down left out (``None`` until two batches came)."""
        if self._first_frames is None or self._last_frames[0] <= self._first_frames[0]:
            return None
        return (self._last_frames[1] - self._first_frames[1]) / (self._last_frames[0] - self._first_frames[0])

    @property
    def return_mean_100(self) -> float:
        return sum(self.returns) / len(self.returns) if self.returns else float("nan")

    @property
    def lag_mean(self) -> float:
        return self.lag_sum / self.lag_count if self.lag_count else 0.0

    def stop_reason(self, target: bool = True) -> Optional[str]:
        """Why training should stop now, or ``None``; ``target=False`` ignores ``run.target_return``."""
        run = self.cfg.run
        if (
            target
            and run.early_stop
            and run.target_return is not None
            and len(self.returns) == 100
            and self.return_mean_100 >= run.target_return
        ):
            return "target_return"
        if self.env_frames >= run.total_frames:
            return "total_frames"
        if self.wall_s >= run.max_time_s:
            return "max_time"
        return None

    def progress(self) -> tuple[float, float]:
        """``(fraction of the budget done, seconds left)``: frames or time, whichever is further
        along; the time left is the sooner of the two budgets at this session's frame rate."""
        run = self.cfg.run
        done = max(self.env_frames / run.total_frames, self.wall_s / run.max_time_s)
        time_left = max(run.max_time_s - self.wall_s, 0.0)
        session_s, session_frames = time.monotonic() - self.start, self.env_frames - self._frames_at_start
        if session_frames > 0 and session_s > 0:
            time_left = min(time_left, max(run.total_frames - self.env_frames, 0) * session_s / session_frames)
        return min(done, 1.0), time_left

    # ---- reporting ------------------------------------------------------------------------
    def maybe_report(self, force: bool = False) -> None:
        """Every ``run.log_interval_s``: one console progress line and one metrics row."""
        now = time.monotonic()
        if not force and now - self._last_report < self.cfg.run.log_interval_s:
            return
        fps = (self.env_frames - self._frames_at_report) / max(now - self._last_report, 1e-9)
        self._last_report, self._frames_at_report = now, self.env_frames
        row = {k: sum(v) / len(v) for k, v in self._window.items() if v}
        self._window.clear()
        row.update(
            {
                "learner/env_frames": self.env_frames,
                "learner/fps": fps,
                "learner/updates": self.updates,
                "learner/episodes": self.episodes,
                "learner/policy_lag_mean": self.lag_mean,
                "learner/policy_lag_max": self.lag_max,
            }
        )
        if self.returns:
            row["actor/return_mean_100"] = self.return_mean_100
        row.update({f"learner/{k}": v for k, v in self.counters.items()})
        row.update(self.budget_book.metrics())
        if self.writer is not None:
            if self._rewind_metrics:  # to the checkpoint's frames, or 0 when --resume found none
                self.writer.rewind(self._frames_at_start)
                self._rewind_metrics = False
            self.writer.write(row, step=self.env_frames)
        ret = f"{self.return_mean_100:7.1f}" if self.returns else "    n/a"
        done, left = self.progress()
        print(
            f"[{self.name}] frames {self.env_frames:>10,} | fps {fps:>8,.0f} | return {ret} "
            f"({len(self.returns)} ep) | lag {self.lag_mean:.2f}/{self.lag_max} | updates {self.updates:,} "
            f"| {self.wall_s:6.1f}s | {done:4.0%} eta {_duration(left)}",
            flush=True,
        )

    def summary(self, stop_reason: str, eval_returns: list[float], extra: Optional[dict] = None) -> dict[str, Any]:
        """The run's summary; also written to ``summary.json``."""
        wall = self.wall_s
        skip = frame_skip(self.cfg.run.env)

        def num(x: float) -> Optional[float]:
            return None if x is None or math.isnan(x) else round(float(x), 4)

        out: dict[str, Any] = {
            "recipe": self.cfg.recipe,
            "env": self.cfg.run.env,
            "world_size": len(self.roles),
            "roles": {str(r): role for r, role in sorted(self.roles.items())},
            "env_frames": self.env_frames,
            "frames_dropped": self.frames_dropped,
            "wall_s": round(wall, 3),
            "fps": round(self.env_frames / max(wall, 1e-9), 1),
            "fps_running": num(self.fps_running),
            # fps counts agent steps (one env.step of one env); the Atari papers count emulator frames
            "frame_skip": skip,
            "frames_per_s": round(skip * self.env_frames / max(wall, 1e-9), 1),
            "episodes": self.episodes,
            "return_mean_100": num(self.return_mean_100),
            "eval_return_mean": num(sum(eval_returns) / len(eval_returns)) if eval_returns else None,
            "eval_episodes": len(eval_returns),
            "policy_lag_mean": num(self.lag_mean),
            "policy_lag_max": self.lag_max,
            "policy_lag_hist": {str(k): v for k, v in sorted(self.lag_hist.items())},
            "learner_updates": self.updates,
            "stop_reason": stop_reason,
            "counters": dict(self.counters),
            "lost_ranks": {str(r): v for r, v in sorted(self.lost.items())},
            "target_return": self.cfg.run.target_return,
            "target_reached": self.target_reached,
            "min_return_after_target": num(self.min_return_after_target),
            "best_eval_return_mean": num(self.best_eval["return_mean"]) if self.best_eval else None,
            "best_eval": self.best_eval,
            "evals": self.evals,
            "time_budget": self.budget_book.per_role(),
        }
        out.update(extra or {})
        try:
            write_private(self.run_dir / "summary.json", json.dumps(out, indent=2))  # never through a symlink
        except OSError as e:  # a full disk or a read-only run directory: said, and the status still tells
            print(f"[{self.name}] summary.json not written ({' '.join(str(e).split())})", flush=True)
        return out

    # ---- checkpointing ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "env_frames": self.env_frames,
            "frames_dropped": self.frames_dropped,
            "episodes": self.episodes,
            "updates": self.updates,
            "returns": list(self.returns),
            "lag_sum": self.lag_sum,
            "lag_count": self.lag_count,
            "lag_max": self.lag_max,
            "lag_hist": dict(self.lag_hist),
            "counters": dict(self.counters),
            "wall_s": self.wall_s,
            "target_reached": self.target_reached,
            "min_return_after_target": self.min_return_after_target,
            "evals": self.evals,
            "best_eval": self.best_eval,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.env_frames, self.episodes, self.updates = state["env_frames"], state["episodes"], state["updates"]
        self.frames_dropped = state.get("frames_dropped", 0)  # absent from older checkpoints
        self.returns.extend(state["returns"])
        self.lag_sum, self.lag_count, self.lag_max = state["lag_sum"], state["lag_count"], state["lag_max"]
        self.lag_hist.update(state["lag_hist"])
        self.counters.update(state["counters"])
        self.elapsed_before = state["wall_s"]
        self.target_reached = state.get("target_reached")
        self.min_return_after_target = state.get("min_return_after_target")
        self.evals, self.best_eval = list(state.get("evals", [])), state.get("best_eval")
        self._frames_at_report = self._frames_at_start = self.env_frames
