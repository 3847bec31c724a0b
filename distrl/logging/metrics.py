"""Metrics sinks owned by the learner rank: ``metrics.jsonl`` always, plus W&B or CSV.

W&B and CSV go through TorchRL's loggers (``WandbLogger`` in offline mode: no account, no
network; ``CSVLogger``). Metric names are ``role/name``.
"""
from __future__ import annotations

import json
import os
import time
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

            self._logger = WandbLogger(
                exp_name=exp_name, offline=os.environ["WANDB_MODE"] == "offline", save_dir=str(run_dir),
                project="distrl", id=wandb_id, config=config, log_env_packages=False,
            )
        elif backend == "csv":
            from torchrl.record.loggers import CSVLogger

            self._logger = CSVLogger(exp_name="csv", log_dir=str(run_dir))

    def write(self, metrics: Mapping[str, float], step: int) -> None:
        row = {"step": int(step), "time": round(time.time(), 3)}
        row.update({k: float(v) for k, v in metrics.items()})
        self._file.write(json.dumps(row) + "\n")
        if self._logger is not None:
            for name, value in metrics.items():
                self._logger.log_scalar(name, float(value), step=int(step))

    def close(self) -> None:
        self._file.close()
        if self.backend == "wandb" and self._logger is not None:
            import wandb

            wandb.finish()
