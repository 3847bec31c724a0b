"""Bad options an operator hits: ``--nproc 0``, a NaN or infinite float field, and metric steps
that went backwards after ``--resume``. Each fails loudly in one line, or is made consistent."""

from __future__ import annotations

import json
import math
import signal
import sys
import types

import pytest
import torch

from distrl.cli.options import experiment_config
from distrl.config import Config, RunConfig, override
from distrl.cli.help import config_fields
from distrl.recipes import RECIPE_NAMES, get_recipe


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err


# ---- --nproc -------------------------------------------------------------------------------------
@pytest.mark.parametrize("nproc", ["0", "-1", "-8"])
def test_nproc_below_one_is_a_usage_error_not_one_process(nproc, capsys):
    from distrl.train import main

    with pytest.raises(SystemExit) as exit_:  # argparse's usage error, as for any bad option
        main(["impala", f"--nproc={nproc}", "--print-config"])
    assert exit_.value.code == 2
    assert f"argument --nproc: must be >= 1, got {int(nproc)}" in one_line_error(capsys)


def test_nproc_one_still_runs_in_this_process(capsys):
    from distrl.train import main

    assert main(["impala", "--nproc", "1", "--print-config"]) == 0
    assert json.loads(capsys.readouterr().out)["recipe"] == "impala"


# ---- non-finite floats ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "item",
    [
        "run.checkpoint_interval_s=nan",  # no check at all: checkpoints never came due
        "run.checkpoint_interval_s=inf",
        "run.target_return=nan",  # Optional[float]: the training mean never reaches it
        "run.max_time_s=inf",
        "transport.call_timeout_s=inf",  # a call that never times out: a hang
        "algo.max_grad_norm=nan",  # impala checks neither of these
        "algo.value_coef=-inf",
    ],
)
def test_a_non_finite_float_is_one_line_naming_the_field(item, capsys):
    from distrl.train import main

    assert main(["impala", "--set", item, "--print-config"]) == 2
    assert item.partition("=")[0] in one_line_error(capsys)


def test_every_float_field_of_every_recipe_rejects_nan_and_inf():
    """The one rule (distrl.config.check_finite) covers the recipes' own fields, which no
    recipe checks for NaN, and keeps what is legitimate: a large bound, an optional left out."""
    floats = 0
    for recipe in RECIPE_NAMES:
        cfg = experiment_config(recipe, "default")
        for name, *_ in config_fields(cfg):
            section, field = name.split(".")
            value = getattr(getattr(cfg, section), field)
            if not isinstance(value, float) and name != "run.target_return":
                continue
            floats += 1
            for bad in ("nan", "inf", "-inf"):
                with pytest.raises(ValueError, match=name.replace(".", r"\.")):
                    override(cfg, **{name: bad})
            assert override(cfg, **{name: str(value)}) == cfg  # its default still parses
    assert floats > 60
    cfg = experiment_config("impala", "default")
    assert override(cfg, **{"run.max_time_s": "1e9", "run.checkpoint_interval_s": "1e9"}).run.max_time_s == 1e9
    assert override(cfg, **{"run.target_return": "none"}).run.target_return is None
    assert override(cfg, **{"run.checkpoint_interval_s": "0"}).run.checkpoint_interval_s == 0.0
    with pytest.raises(ValueError, match="run.checkpoint_interval_s must be >= 0"):
        override(cfg, **{"run.checkpoint_interval_s": "-1"})


def test_a_config_built_in_python_is_held_to_the_same_rule():
    algo = get_recipe("impala").default_config().algo
    with pytest.raises(ValueError, match=r"run\.checkpoint_interval_s must be >= 0 .*got nan"):
        RunConfig(checkpoint_interval_s=float("nan"))
    with pytest.raises(ValueError, match=r"run\.target_return must be a finite number, got nan"):
        Config(recipe="impala", algo=algo, run=RunConfig(target_return=float("nan")))
    with pytest.raises(ValueError, match=r"algo\.entropy_coef must be a finite number, got inf"):
        Config(recipe="impala", algo=type(algo)(entropy_coef=math.inf))


# ---- metrics.jsonl after --resume ----------------------------------------------------------------
def steps(path) -> list[int]:
    """The steps of the whole rows of a ``metrics.jsonl`` (as distrl.logging.plots reads it: torn lines skipped)."""
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line)["step"])
        except json.JSONDecodeError:
            continue
    return out


@pytest.fixture
def keep_sigterm():
    """A LearnerSession takes SIGTERM (a preemption checkpoint); put the test runner's back."""
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


def test_resume_drops_the_rows_past_the_checkpoint(tmp_path, keep_sigterm):
    """A run checkpoints at 100 frames, reports up to 300 and is killed (a torn last line); the
    resumed run restores 100 frames: its rows follow on from 100 in metrics.jsonl and in the CSV
    backend's files, and the killed run's later rows are kept aside."""
    from distrl.runtime.context import RoleContext
    from distrl.roles.session import LearnerSession

    cfg = override(get_recipe("impala").default_config(), **{"run.logger": "csv", "run.run_dir": str(tmp_path)})
    model = torch.nn.Linear(2, 2)
    optim = torch.optim.SGD(model.parameters(), lr=0.1)

    killed = LearnerSession(RoleContext(cfg, None, 0, {0: "learner"}, tmp_path))
    killed.restore(model, optim)
    for n in range(3):
        killed.tracker.add_frames(100)
        killed.tracker.maybe_report(force=True)
        if n == 0:
            killed.checkpoint(model, optim)
    killed.tracker.writer.close()
    metrics = tmp_path / "metrics.jsonl"
    with open(metrics, "a") as f:
        f.write('{"step": 400, "time": 1')  # the kill cut the last row short

    resumed = LearnerSession(RoleContext(override(cfg, **{"run.resume": True}), None, 0, {0: "learner"}, tmp_path))
    assert resumed.restore(model, optim) is not None and resumed.tracker.env_frames == 100
    for n in (50, 100, 100):
        resumed.tracker.add_frames(n)
        resumed.tracker.maybe_report(force=True)
    resumed.tracker.writer.close()

    # unfixed: [100, 200, 300, 250, 350], the row at 150 glued to the torn line and lost
    assert steps(metrics) == sorted(steps(metrics)) and steps(metrics) == [100, 150, 250, 350]
    assert all(json.loads(line) for line in metrics.read_text().splitlines())  # the torn row is gone
    assert steps(tmp_path / "metrics.rewound.jsonl") == [200, 300]  # nothing deleted
    csv = tmp_path / "csv" / "scalars" / "learner" / "env_frames.csv"
    assert [line.split(",")[0] for line in csv.read_text().splitlines()] == ["100", "150", "250", "350"]
    assert not list(tmp_path.glob(".*.tmp"))


class FakeWandbLogger:
    """TorchRL's WandbLogger as far as MetricsWriter uses it: no wandb start, no network."""

    def __init__(self, **kwargs):
        self.rows: list[int] = []

    def log_metrics(self, metrics, step=None):
        self.rows.append(step)


def test_wandb_gets_only_steps_past_the_ones_it_holds(tmp_path, monkeypatch):
    """W&B's history cannot be cut: after a resume it is sent only rows past the highest step the
    run directory ever wrote, as W&B itself ignores a global step lower than its last."""
    import torchrl.record.loggers as loggers

    from distrl.logging.metrics import MetricsWriter

    monkeypatch.setattr(loggers, "WandbLogger", FakeWandbLogger)
    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(finish=lambda: None))
    config = get_recipe("impala").default_config().to_dict()

    first = MetricsWriter(tmp_path, "wandb", "run", config, "abc")
    for step in (100, 200, 300):
        first.write({"learner/fps": 1.0}, step=step)
    first.close()
    second = MetricsWriter(tmp_path, "wandb", "run", config, "abc")
    second.rewind(100)
    for step in (150, 300, 400):
        second.write({"learner/fps": 2.0}, step=step)
    second.close()

    assert first._logger.rows == [100, 200, 300] and second._logger.rows == [400]
    assert steps(tmp_path / "metrics.jsonl") == [100, 150, 300, 400]
    third = MetricsWriter(tmp_path, "wandb", "run", config, "abc")  # a second resume, from 150
    third.rewind(150)
    third.write({"learner/fps": 3.0}, step=350)
    third.write({"learner/fps": 3.0}, step=450)
    third.close()
    assert third._logger.rows == [450]  # 350 < 400, which W&B already holds from the second run
    assert steps(tmp_path / "metrics.jsonl") == [100, 150, 350, 450]
