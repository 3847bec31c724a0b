"""Files a run cannot write, or must not write through (docs/reliability.md's fault table):

- a checkpoint write that fails (a full disk, a read-only folder) is one line, the run stops with
  ``checkpoint_failed`` and exit 7, and ``summary.json`` says so, naming the newest checkpoint kept
  (before: a traceback, exit 1, no ``summary.json``);
- a run directory another user owns is refused in one line, exit 2;
- the lock file, ``config.json`` (and ``job_id``, ``roles.json``), a checkpoint's temporary file,
  ``summary.json``, ``metrics.jsonl`` (and its rewound rows, the CSV files, ``wandb_id``) and
  ``curves.png`` are opened without following a symlink: one planted there is refused, its target
  untouched.
"""

from __future__ import annotations

import errno
import json
import os

import pytest
import torch

from distrl.runtime.checkpoint import checkpoint_dir, list_checkpoints, save_checkpoint
from distrl.runtime.job import LOCK_NAME, claim_run_dir, ensure_run_dir_free, write_private

ARGS = ["impala", "--experiment", "debug", "--logger", "none", "--set", "run.eval_episodes=2"]


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS])
def test_a_failed_checkpoint_is_one_line_exit_7_and_a_summary(tmp_path, in_process, capsys, monkeypatch, code):
    """One process, a checkpoint after every update; the third write fails as a full disk (or a
    read-only folder) makes it fail: the run stops at once, the two checkpoints before it kept."""
    from distrl.roles import session

    calls = []

    def failing_save(run_dir, step, state, keep=2):
        calls.append(step)
        if len(calls) == 3:
            raise OSError(code, os.strerror(code), str(checkpoint_dir(run_dir) / f".ckpt_{step:010d}.pt.tmp"))
        return save_checkpoint(run_dir, step, state, keep)

    monkeypatch.setattr(session, "save_checkpoint", failing_save)
    run = tmp_path / "run"
    argv = ARGS + ["--run-dir", str(run), "--set", "run.checkpoint_interval_s=0", "--total-frames", "100000"]
    assert in_process(argv) == 7
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, err
    lines = [line for line in out.splitlines() if "not written" in line]
    kept = list_checkpoints(run)
    assert len(lines) == 1 and len(calls) == 3, (lines, calls)
    assert lines[0].startswith(f"[learner] checkpoint at update {calls[2]} not written ([Errno {code}]")
    assert lines[0].endswith(f"stopping: the newest checkpoint is {kept[-1].name}"), lines[0]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stop_reason"] == "checkpoint_failed"
    assert summary["checkpoint"] == kept[-1].relative_to(run).as_posix()
    assert summary["checkpoint_error"].startswith(f"checkpoint: [Errno {code}]")
    assert not list(checkpoint_dir(run).glob(".*.tmp"))


def test_the_exit_status_of_a_failed_checkpoint_is_7():
    from distrl.cli.runner import exit_code

    assert exit_code({"stop_reason": "checkpoint_failed"}) == 7


def test_a_run_directory_another_user_owns_is_refused_in_one_line(tmp_path, in_process, capsys):
    if os.getuid() != 0:
        pytest.skip("making a directory another user's takes root")
    run = tmp_path / "theirs"
    run.mkdir()
    assert in_process([*ARGS, "--print-config"]) == 0
    (run / "config.json").write_text(capsys.readouterr().out)  # a run of theirs, for --resume
    os.chown(run, 65534, 65534)  # nobody's
    before = sorted(p.name for p in run.iterdir())
    for resume in ([], ["--resume"]):
        assert in_process(ARGS + ["--run-dir", str(run), *resume]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"error: {run} belongs to another user (uid 65534"), err
    for check in (ensure_run_dir_free, lambda d: claim_run_dir(d).__enter__()):
        with pytest.raises(ValueError, match="belongs to another user"):
            check(run)
    assert sorted(p.name for p in run.iterdir()) == before  # nothing written, no lock taken


@pytest.mark.parametrize("name", [LOCK_NAME, "config.json", "job_id", "summary.json", "metrics.jsonl"])
def test_a_symlink_planted_as_a_run_file_is_refused_not_followed(tmp_path, in_process, capsys, name):
    run, victim = tmp_path / "run", tmp_path / "victim"
    run.mkdir(mode=0o700)
    victim.write_text("keep me")
    (run / name).symlink_to(victim)
    assert in_process(ARGS + ["--run-dir", str(run), "--total-frames", "200"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{name} is a symlink" in err, err
    assert victim.read_text() == "keep me"
    with pytest.raises(OSError) as e:  # the write itself, should a link appear after the check
        write_private(run / name, "x")
    assert e.value.errno == errno.ELOOP and victim.read_text() == "keep me"


def test_a_symlink_planted_as_a_checkpoints_temp_file_is_refused_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    folder = checkpoint_dir(tmp_path / "run")
    folder.mkdir(parents=True)
    (folder / ".ckpt_0000000007.pt.tmp").symlink_to(victim)
    with pytest.raises(OSError) as e:
        save_checkpoint(tmp_path / "run", 7, {"w": torch.zeros(2)})
    assert e.value.errno == errno.ELOOP
    assert victim.read_text() == "keep me"
    assert list(folder.iterdir()) == []  # the link removed with the failed write, no checkpoint


def test_a_symlink_planted_after_the_check_is_not_written_through(tmp_path, capsys):
    """A link that appears once the run has started (the check at start passed): every run file the
    learner writes by name is opened ``O_NOFOLLOW``, so the write fails (ELOOP) and the target keeps
    its bytes: the summary in one line, the metrics rows, the CSV files, the rewound rows, the W&B
    id, the curves."""
    from distrl.logging.metrics import MetricsWriter, wandb_run_id
    from distrl.logging.plots import plot_run_curves
    from distrl.logging.tracker import RunTracker

    run, victim = tmp_path / "run", tmp_path / "victim"
    run.mkdir(mode=0o700)
    victim.write_text("keep me")

    def plant(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        path.symlink_to(victim)
        return path

    def refused(write, path):
        with pytest.raises(OSError) as e:
            write()
        assert e.value.errno == errno.ELOOP and victim.read_text() == "keep me", path
        path.unlink()

    refused(lambda: MetricsWriter(run, "none", "x", {}), plant(run / "metrics.jsonl"))
    refused(lambda: wandb_run_id(run), plant(run / "wandb_id"))
    writer = MetricsWriter(run, "csv", "x", {})
    writer.write({"learner/loss": 1.0}, step=10)
    refused(
        lambda: writer.write({"learner/entropy": 0.5}, step=20),
        plant(run / "csv" / "scalars" / "learner" / "entropy.csv"),
    )
    plant(run / "metrics.rewound.jsonl")
    refused(lambda: writer.rewind(5), run / "metrics.rewound.jsonl")
    writer.close()

    plant(run / "curves.png")
    plot_run_curves(run, "impala")  # a plot that fails is a warning line, never the run
    assert "curves.png not written" in capsys.readouterr().out and victim.read_text() == "keep me"

    plant(run / "summary.json")
    from distrl.recipes.impala.recipe import debug

    RunTracker(debug(), run, {0: "learner"}, None, "impala").summary("max_time", [])
    out = capsys.readouterr().out
    assert out.count("summary.json not written") == 1 and "Too many levels of symbolic links" in out, out
    assert victim.read_text() == "keep me"
