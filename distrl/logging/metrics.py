"""Metrics sinks owned by the learner rank: ``metrics.jsonl`` always, plus W&B or CSV.

W&B and CSV go through TorchRL's loggers (``WandbLogger`` in offline mode: no account, no
network; ``CSVLogger``). Metric names are ``role/name``. W&B gets one history row per
:meth:`MetricsWriter.write` (one progress report), the resolved config, tags for the recipe and
the env, and its project, entity, group and run name from ``run.wandb_*``.
"""
from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Mapping, Optional


class MetricsWriter:
    """Writes one JSON line per :meth:`write` and forwards scalars to the chosen backend."""

    def __init__(self, run_dir: Path, backend: str, exp_name: str, config: dict, wandb_id: Optional[str] = None):
        self.path = Path(run_dir) / "metrics.jsonl"
        self._file = open(self.path, "a", buffering=1)
        self.backend = backend
        self._logger = None
        if backend == "wandb":
            os.environ.setdefault("WANDB_MODE", "offline")
            os.environ.setdefault("WANDB_SILENT", "true")
            from torchrl.record.loggers import WandbLogger

            run = config.get("run", {})
            self._logger = WandbLogger(
                exp_name=run.get("wandb_name") or exp_name, offline=os.environ["WANDB_MODE"] == "offline",
                save_dir=str(run_dir), project=run.get("wandb_project") or "distrl", id=wandb_id, config=config,
                log_env_packages=False, entity=run.get("wandb_entity"),
                group=run.get("wandb_group") or config.get("recipe"),
                tags=[t for t in (config.get("recipe"), run.get("env")) if t],
            )
        elif backend == "csv":
            from torchrl.record.loggers import CSVLogger

            self._logger = CSVLogger(exp_name="csv", log_dir=str(run_dir))

    def write(self, metrics: Mapping[str, float], step: int) -> None:
        row = {"step": int(step), "time": round(time.time(), 3)}
        row.update({k: float(v) for k, v in metrics.items()})
        self._file.write(json.dumps(row) + "\n")
        if self.backend == "wandb" and self._logger is not None:
            # one call, one history row: a call per metric fragments W&B's charts
            self._logger.log_metrics({k: float(v) for k, v in metrics.items()}, step=int(step))
        elif self._logger is not None:
            for name, value in metrics.items():
                self._logger.log_scalar(name, float(value), step=int(step))

    def close(self) -> None:
        self._file.close()
        if self.backend == "wandb" and self._logger is not None:
            import wandb

            wandb.finish()


def wandb_run_id(run_dir: Path) -> str:
    """The W&B run id of this run directory, made once and kept so a resumed run continues it."""
    path = run_dir / "wandb_id"
    if not path.exists():
        path.write_text(uuid.uuid4().hex[:12])
    return path.read_text().strip()
