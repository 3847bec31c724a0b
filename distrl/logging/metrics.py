"""Metrics sinks owned by the learner rank: ``metrics.jsonl`` always, plus W&B or CSV.

W&B and CSV go through TorchRL's loggers (``WandbLogger`` in offline mode: no account, no
network; ``CSVLogger``). Metric names are ``role/name``. W&B gets one history row per
:meth:`MetricsWriter.write` (one progress report), the resolved config, tags for the recipe and
the env, and its project, entity, group and run name from ``run.wandb_*``. A resumed run
continues the history from its checkpoint's step (:meth:`MetricsWriter.rewind`). Every file here is
opened without following a symlink (``distrl.runtime.job.open_private``), TorchRL's CSV files too.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Mapping, Optional

from distrl.runtime.job import open_private, write_private


class MetricsWriter:
    """Writes one JSON line per :meth:`write` and forwards scalars to the chosen backend."""

    def __init__(
        self,
        run_dir: Path,
        backend: str,
        exp_name: str,
        config: dict,
        wandb_id: Optional[str] = None,
        recipe_name: Optional[str] = None,
    ):
        self.path = Path(run_dir) / "metrics.jsonl"
        self._file = open_private(self.path, "a", buffering=1)
        self.backend = backend
        self._wandb_floor = -1  # W&B gets only rows past this step (rewind)
        self._logger = None
        if backend == "wandb":
            os.environ.setdefault("WANDB_MODE", "offline")
            os.environ.setdefault("WANDB_SILENT", "true")
            from torchrl.record.loggers import WandbLogger

            run = config.get("run", {})
            recipe = recipe_name or config.get("recipe") or None  # the short name: W&B's group and tag
            self._logger = WandbLogger(
                exp_name=run.get("wandb_name") or exp_name,
                offline=os.environ["WANDB_MODE"] == "offline",
                save_dir=str(run_dir),
                project=run.get("wandb_project") or "distrl",
                id=wandb_id,
                config=config,
                log_env_packages=False,
                entity=run.get("wandb_entity"),
                group=run.get("wandb_group") or recipe,
                tags=[t for t in (recipe, run.get("env")) if t],
            )
        elif backend == "csv":
            from torchrl.record.loggers import CSVLogger

            self._logger = CSVLogger(exp_name="csv", log_dir=str(run_dir))

    def write(self, metrics: Mapping[str, float], step: int) -> None:
        row = {"step": int(step), "time": round(time.time(), 3)}
        row.update({k: float(v) for k, v in metrics.items()})
        self._file.write(json.dumps(row) + "\n")
        if self.backend == "wandb" and self._logger is not None:
            if step > self._wandb_floor:  # W&B holds the rows up to it already (rewind)
                # one call, one history row: a call per metric fragments W&B's charts
                self._logger.log_metrics({k: float(v) for k, v in metrics.items()}, step=int(step))
        elif self._logger is not None:
            for name, value in metrics.items():
                self._csv_file(name)
                self._logger.log_scalar(name, float(value), step=int(step))

    def _csv_file(self, name: str) -> None:
        """Open metric ``name``'s CSV file for TorchRL's ``CSVLogger`` before it does (it would follow
        a symlink: ``open(path, "a+")``), the one it then appends to (its ``files``, by path)."""
        exp = self._logger.experiment
        path = os.path.join(exp.log_dir, "scalars", name + ".csv")
        if path not in exp.files:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            exp.files[path] = open_private(path, "a+")

    def rewind(self, step: int) -> None:
        """Make the history read as one run that goes on from ``step``, before a resumed run's
        first row (:class:`~distrl.logging.tracker.RunTracker` calls it with the restored step).

        A run killed after its last checkpoint wrote rows past it; the resumed run restores that
        checkpoint and writes those steps again. As TensorBoard's ``purge_step`` does, rows past
        ``step`` leave ``metrics.jsonl`` (rewritten atomically; a torn last line is dropped) and
        the CSV backend's files; they are appended to ``metrics.rewound.jsonl``, not deleted.

        W&B's history cannot be rewritten, and W&B ignores a global step lower than its last one;
        TorchRL's ``WandbLogger`` sends each metric against its own ``<role>/step`` instead, which
        W&B would take, drawing the curves back over themselves. So the writer does what W&B does
        with a global step: rows at or below the highest step this run directory ever wrote are not
        sent to W&B (they are in ``metrics.jsonl``). W&B keeps the killed run's rows for those
        steps and carries on with the resumed run's past them (offline, each start writes its own
        ``wandb/offline-run-*`` folder under the one run id, for ``wandb sync``).
        """
        self._file.close()
        rows = _rows(self.path)
        aside = self.path.with_name("metrics.rewound.jsonl")
        self._wandb_floor = max((s for s, _ in rows + _rows(aside)), default=-1)
        gone = [line for s, line in rows if s > step]
        if gone:  # aside first: a crash in between leaves rows twice, never none
            with open_private(aside, "a") as f:
                f.writelines(line + "\n" for line in gone)
        _rewrite(self.path, [line for s, line in rows if s <= step])
        for csv in sorted((self.path.parent / "csv" / "scalars").rglob("*.csv")):
            _rewrite(csv, [line for line in csv.read_text().splitlines() if _csv_step(line) <= step])
        self._file = open_private(self.path, "a", buffering=1)

    def close(self) -> None:
        self._file.close()
        if self.backend == "wandb" and self._logger is not None:
            import wandb

            wandb.finish()


def _rows(path: Path) -> list[tuple[int, str]]:
    """``(step, line)`` of each whole row of a ``metrics.jsonl``; none when it does not exist."""
    out = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            out.append((int(json.loads(line)["step"]), line))
        except (ValueError, KeyError, TypeError):  # a torn last line: the killed run's, half written
            continue
    return out


def _csv_step(line: str) -> float:
    """The step of a TorchRL CSVLogger line ``step,value``; a torn one sorts past every step."""
    try:
        return int(line.split(",", 1)[0])
    except ValueError:
        return float("inf")


def _rewrite(path: Path, lines: list[str]) -> None:
    """Replace ``path`` by ``lines`` atomically (temporary file, fsync, ``os.replace``)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open_private(tmp, "w") as f:
        f.writelines(line + "\n" for line in lines)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def wandb_run_id(run_dir: Path) -> str:
    """The W&B run id of this run directory, made once and kept so a resumed run continues it."""
    path = run_dir / "wandb_id"
    try:  # read without following a symlink either: a planted id would send the run's history elsewhere
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW)) as f:
            return f.read().strip()
    except FileNotFoundError:
        run_id = uuid.uuid4().hex[:12]
        write_private(path, run_id)
        return run_id
