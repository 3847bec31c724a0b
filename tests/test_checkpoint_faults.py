"""Damaged checkpoints: nothing lost, nothing hangs. Each test injects one fault into a run's
checkpoint folder (garbage in every file, an old run's higher-numbered files, a full disk inside
``torch.save``, a crash's temporary file) and checks what an operator expects: a resume that would
silently start over stops in one line instead, the checkpoint just written survives pruning, and no
temporary file outlives the write that made it."""

from __future__ import annotations

import errno
import time

import pytest
import torch

from distrl.runtime.checkpoint import (
    DamagedCheckpoints,
    checkpoint_dir,
    list_checkpoints,
    load_latest_checkpoint,
    resume_checkpoint,
    save_best,
    save_checkpoint,
)
from distrl.cli.options import experiment_config
from distrl.config import override
from distrl.runtime.context import RoleContext
from distrl.recipes.impala.recipe import default as default_config
from distrl.roles.session import LearnerSession


def damage_every_checkpoint(run_dir) -> None:
    """Overwrite each checkpoint of ``run_dir`` with garbage bytes."""
    for path in list_checkpoints(run_dir):
        path.write_bytes(b"\x00garbage, not a zip archive\xff" * 4)


def saved_steps(run_dir) -> list[int]:
    """The ``step`` held by each checkpoint of ``run_dir``, in the order they are listed."""
    return [torch.load(p, weights_only=False)["step"] for p in list_checkpoints(run_dir)]


def restore(run_dir, **fields):
    """What ``LearnerSession.restore`` gives a learner resumed in ``run_dir`` with config ``fields``."""
    cfg = override(
        default_config(), **{"run.logger": "none", "run.run_dir": str(run_dir), "run.resume": True, **fields}
    )
    session = LearnerSession(RoleContext(cfg, None, 0, {0: "learner"}, run_dir))
    model = torch.nn.Linear(4, 2)
    try:
        return session.restore(model, torch.optim.Adam(model.parameters()))
    finally:
        session.tracker.writer.close()


# ---- every checkpoint damaged: stop, do not start over -------------------------------------------


def test_resume_with_every_checkpoint_damaged_is_refused(tmp_path):
    for step in (10, 20):
        save_checkpoint(tmp_path, step, {"step": step})
    damage_every_checkpoint(tmp_path)
    with pytest.raises(DamagedCheckpoints) as refused:
        resume_checkpoint(tmp_path)
    message = str(refused.value)
    assert "\n" not in message and str(checkpoint_dir(tmp_path)) in message, message
    assert "none of the 2 checkpoint files" in message and "run.allow_fresh=true" in message, message
    assert len(list_checkpoints(tmp_path)) == 2  # refused, not pruned: the files are still there to inspect


def test_the_learner_refuses_a_damaged_resume_unless_allow_fresh(tmp_path, capsys):
    model = torch.nn.Linear(4, 2)
    save_checkpoint(tmp_path, 7, {"model": model.state_dict()})
    damage_every_checkpoint(tmp_path)
    with pytest.raises(DamagedCheckpoints, match="none of the 1 checkpoint files"):
        restore(tmp_path)
    assert restore(tmp_path, **{"run.allow_fresh": True}) is None  # the operator chose to start over
    assert "no loadable checkpoint" in capsys.readouterr().out
    # no checkpoint file at all: a resume starts fresh, as it always did
    (tmp_path / "empty").mkdir()
    assert restore(tmp_path / "empty") is None and "starting fresh" in capsys.readouterr().out


@pytest.mark.timeout(120)
def test_a_damaged_resume_ends_in_one_line_and_exit_status_2(tmp_path, in_process, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(experiment_config("impala", "debug").to_json())
    save_checkpoint(run, 40, {"step": 40})
    save_checkpoint(run, 80, {"step": 80})
    damage_every_checkpoint(run)
    damaged = {p.name: p.read_bytes() for p in list_checkpoints(run)}
    start = time.monotonic()
    # without the refusal this trains from scratch: --max-time-s bounds that
    code = in_process(["impala", "--resume", "--run-dir", str(run), "--logger", "none", "--max-time-s", "5"])
    took = time.monotonic() - start
    err = capsys.readouterr().err
    print(f"\ndamaged resume refused {took:.2f}s after the launch")
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --resume: none of the 2 checkpoint files"), err
    assert str(run) in lines[0] and "run.allow_fresh=true" in lines[0], err
    assert {p.name: p.read_bytes() for p in list_checkpoints(run)} == damaged  # nothing pruned, nothing new


# ---- pruning by step, never the checkpoint just written ----------------------------------------


def test_pruning_keeps_the_checkpoint_just_written_below_an_old_runs_numbers(tmp_path):
    """A run that starts over in a directory an earlier run checkpointed further: its own checkpoint
    stays, and the earlier run's higher-numbered ones go (``--resume`` would otherwise pick them)."""
    for step in (5000, 5060):
        save_checkpoint(tmp_path, step, {"step": step})
    written = save_checkpoint(tmp_path, 60, {"step": 60})
    assert list_checkpoints(tmp_path) == [written] and load_latest_checkpoint(tmp_path)["step"] == 60
    save_checkpoint(tmp_path, 120, {"step": 120})
    assert saved_steps(tmp_path) == [60, 120]
    assert resume_checkpoint(tmp_path)["step"] == 120


def test_resumed_from_an_older_checkpoint_the_damaged_newer_one_goes(tmp_path):
    """The newest checkpoint damaged: resume falls back to the one before, and the run's next
    checkpoint replaces the damaged one as the newest instead of being pruned under it."""
    save_checkpoint(tmp_path, 100, {"step": 100})
    (checkpoint_dir(tmp_path) / "ckpt_0000000200.pt").write_bytes(b"half a file")
    assert resume_checkpoint(tmp_path)["step"] == 100
    save_checkpoint(tmp_path, 130, {"step": 130})
    assert saved_steps(tmp_path) == [100, 130]
    assert resume_checkpoint(tmp_path)["step"] == 130


def test_checkpoints_are_ordered_by_step_not_by_name(tmp_path):
    folder = checkpoint_dir(tmp_path)
    folder.mkdir(parents=True)
    torch.save({"step": 99}, folder / "ckpt_99.pt")  # by name it sorts after ckpt_0000000100.pt
    save_checkpoint(tmp_path, 100, {"step": 100}, keep=3)
    save_checkpoint(tmp_path, 10**10, {"step": 10**10}, keep=3)  # eleven digits
    assert saved_steps(tmp_path) == [99, 100, 10**10]
    assert load_latest_checkpoint(tmp_path)["step"] == 10**10


# ---- temporary files -----------------------------------------------------------------------------


def test_a_full_disk_removes_the_temp_file_and_raises(tmp_path, monkeypatch):
    save_checkpoint(tmp_path, 1, {"step": 1})

    def full_disk(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 the first bytes of a checkpoint")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(OSError) as failed:
        save_checkpoint(tmp_path, 2, {"step": 2})
    assert failed.value.errno == errno.ENOSPC
    with pytest.raises(OSError):
        save_best(tmp_path, {"step": 2})
    assert sorted(p.name for p in checkpoint_dir(tmp_path).iterdir()) == ["ckpt_0000000001.pt"]
    monkeypatch.undo()
    assert load_latest_checkpoint(tmp_path)["step"] == 1


def test_a_crashs_temp_files_go_at_the_next_save_and_at_resume(tmp_path):
    """What ``DISTRL_FAULT=crash_before_rename`` leaves (test_checkpoint.py shows it does): a
    temporary file beside the checkpoints, no rename."""
    save_checkpoint(tmp_path, 1, {"step": 1})
    folder = checkpoint_dir(tmp_path)
    for name in (".ckpt_0000000002.pt.tmp", ".best.pt.tmp"):
        (folder / name).write_bytes(b"a write that never finished")
    save_checkpoint(tmp_path, 3, {"step": 3})
    assert not (folder / ".ckpt_0000000002.pt.tmp").exists()
    assert resume_checkpoint(tmp_path)["step"] == 3
    assert not [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]
