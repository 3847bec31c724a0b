"""Atomic checkpoints: a crash before the rename leaves the previous one loadable."""

from __future__ import annotations

import sys

import torch

from helpers import child_env
from distrl.runtime.checkpoint import list_checkpoints, load_latest_checkpoint, save_checkpoint


def test_keeps_newest_two_and_loads_latest(tmp_path):
    for step in range(4):
        save_checkpoint(tmp_path, step, {"step": step, "w": torch.full((3,), float(step))})
    assert [p.name for p in list_checkpoints(tmp_path)] == ["ckpt_0000000002.pt", "ckpt_0000000003.pt"]
    assert load_latest_checkpoint(tmp_path)["step"] == 3


def test_damaged_newest_falls_back(tmp_path):
    save_checkpoint(tmp_path, 1, {"step": 1})
    newest = save_checkpoint(tmp_path, 2, {"step": 2})
    newest.write_bytes(b"not a checkpoint")
    assert load_latest_checkpoint(tmp_path)["step"] == 1


def test_crash_between_temp_file_and_rename(tmp_path, jobs):
    save_checkpoint(tmp_path, 1, {"step": 1})
    code = (
        f"from distrl.runtime.checkpoint import save_checkpoint; save_checkpoint({str(tmp_path)!r}, 2, {{'step': 2}})"
    )
    job = jobs.start([sys.executable, "-c", code], env=child_env(DISTRL_FAULT="crash_before_rename"))
    assert job.wait(60) == 17, job.tail()  # died mid-save, after the temp file was written
    assert any(p.name.endswith(".tmp") for p in (tmp_path / "checkpoints").iterdir())
    assert load_latest_checkpoint(tmp_path)["step"] == 1


def test_no_checkpoint(tmp_path):
    assert load_latest_checkpoint(tmp_path) is None
