"""Resumes that change something (issue #46, part two): a changed network, env, recipe or Ape-X
shard count is refused in one line with exit status 2 before anything is written (``config.json``
untouched); a changed learning rate is applied over the restored optimizer state, on the same
schedule clock, and said in one line."""

from __future__ import annotations

import json

import pytest
import torch

from distrl.roles.learner import set_lr
from distrl.runtime.checkpoint import load_latest_checkpoint, rescale_lr
from distrl.train import main

IMPALA = ["impala", "--experiment", "debug", "--logger", "none", "--max-time-s", "30"]


def _train(in_process, capsys, args: list[str]):
    """``(status, stdout, stderr)`` of launch/train.py ``args``, run in this process."""
    capsys.readouterr()
    status = in_process(args)
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.timeout(120)
def test_a_changed_network_is_refused_in_one_line_and_config_json_kept(tmp_path, in_process, capsys):
    run = tmp_path / "run"
    assert _train(in_process, capsys, [*IMPALA, "--run-dir", str(run), "--total-frames", "3000"])[0] == 0
    before = (run / "config.json").read_bytes()
    code, _, err = _train(in_process, capsys, [*IMPALA, "--run-dir", str(run), "--resume", "--set", "net.hidden=32"])
    assert code == 2
    assert err.startswith("error: --resume cannot change net.hidden [64, 64] -> [32]") and err.count("\n") == 1, err
    assert (run / "config.json").read_bytes() == before


@pytest.mark.timeout(120)
def test_a_changed_learning_rate_is_applied_and_said(tmp_path, in_process, capsys):
    run = tmp_path / "run"
    linear = [*IMPALA, "--run-dir", str(run), "--set", "run.lr_schedule=linear"]
    assert _train(in_process, capsys, [*linear, "--total-frames", "6000"])[0] == 0
    old = load_latest_checkpoint(run)["optim"]["param_groups"][0]
    code, out, err = _train(
        in_process, capsys, [*linear, "--resume", "--total-frames", "9000", "--set", "algo.lr=1e-3"]
    )
    assert code == 0, out[-2000:] + err[-2000:]
    assert "[learner] --resume: algo.lr 0.0005 -> 0.001 applied" in out, out[-2000:]
    new = load_latest_checkpoint(run)["optim"]["param_groups"][0]
    assert old["initial_lr"] == pytest.approx(5e-4) and new["initial_lr"] == pytest.approx(1e-3)
    assert json.loads((run / "config.json").read_text())["algo"]["lr"] == pytest.approx(1e-3)


def test_a_new_learning_rate_keeps_the_schedules_clock():
    """Half-way through a linear schedule (rate = start x 0.5), a new start rate of 1e-3 gives 5e-4
    now: the start moves, the budget done does not."""
    optim = torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))], lr=5e-4)
    set_lr(optim, 0.5)
    assert rescale_lr(optim, 5e-4, 1e-3) and not rescale_lr(optim, 1e-3, 1e-3)
    group = optim.param_groups[0]
    assert group["initial_lr"] == pytest.approx(1e-3) and group["lr"] == pytest.approx(5e-4)
    set_lr(optim, 0.25)  # later on the same clock
    assert group["lr"] == pytest.approx(2.5e-4)


def test_a_changed_apex_shard_count_is_refused_before_anything_starts(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    args = ["apex", "--run-dir", str(run)]
    assert main([*args, "--print-config"]) == 0
    (run / "config.json").write_text(capsys.readouterr().out)
    before = (run / "config.json").read_bytes()
    assert main([*args, "--resume", "--set", "algo.shards=2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --resume cannot change algo.shards 1 -> 2") and err.count("\n") == 1, err
    assert (run / "config.json").read_bytes() == before and sorted(p.name for p in run.iterdir()) == ["config.json"]
