"""Poisoned data (issue #46, part two): a NaN or inf reward, observation, priority or gradient is
refused where it enters and counted, never learned from, folded into statistics, put into Ape-X's
sum tree, applied to the weights or checkpointed.

Units first (the sum tree, the replay store, the observation statistics, the trajectory checks),
then two runs with an injected fault (``distrl/runtime/faults.py``): one NaN reward into Ape-X, and
ten infinite gradients of finite losses into impala."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from distrl.data import keys
from distrl.data.trajectory import check_trajectory, finite_rows
from distrl.nn.obs_norm import ObsNorm, fold_observations
from distrl.replay.store import ReplayStore, all_finite
from distrl.replay.sum_tree import SumTreeSampler
from helpers import child_env, read_metrics, read_summary


def _transitions(n: int) -> TensorDict:
    return TensorDict(
        {keys.OBSERVATION: torch.randn(n, 4), keys.ACTION: torch.zeros(n, dtype=torch.int64)}, batch_size=[n]
    )


def test_a_nan_priority_leaves_the_sum_tree_total_finite():
    sampler = SumTreeSampler(16)
    store = ReplayStore(16, None, sampler=sampler)
    assert store.extend(_transitions(8), torch.rand(8))
    total = float(sampler.tree.total)
    assert not store.extend(_transitions(4), torch.tensor([1.0, float("nan"), 1.0, 1.0]))  # refused whole
    assert store.rejected == 1 and len(store) == 8 and float(sampler.tree.total) == total
    sampler.update_priority(torch.tensor([0, 1, 2]), torch.tensor([float("nan"), float("inf"), 2.0]))
    assert sampler.nonfinite == 2 and torch.isfinite(sampler.tree.total)
    assert sampler.max_priority == 2.0  # the finite one applied; the others kept their priorities
    index, _ = sampler.sample(store.buffer.storage, 32)
    assert int(index.max()) < 8


def test_all_finite_looks_at_every_float_leaf_and_the_priority():
    td = _transitions(3)
    assert all_finite((td, torch.ones(3), None))
    assert not all_finite((td, torch.tensor([1.0, float("nan"), 1.0])))
    td[keys.NSTEP_RETURN] = torch.tensor([0.0, float("inf"), 1.0])
    assert not all_finite((td, torch.ones(3)))


def test_observation_statistics_refuse_a_batch_with_a_nan():
    norm = ObsNorm(3)
    assert fold_observations(norm, torch.randn(64, 3))
    before = (norm.count.clone(), norm.mean.clone(), norm.var.clone())
    poisoned = torch.randn(64, 3)
    poisoned[5, 1] = float("nan")
    assert not fold_observations(norm, poisoned)
    assert not norm.update_batch(torch.full((2, 3), float("inf")))
    assert all(torch.equal(a, b) for a, b in zip(before, (norm.count, norm.mean, norm.var)))


def test_a_nan_reward_fails_the_trajectory_check_and_finite_rows_finds_its_row():
    B, T = 3, 5
    traj = TensorDict(
        {
            keys.OBSERVATION: torch.randn(B, T, 4),
            keys.ACTION: torch.zeros(B, T, dtype=torch.int64),
            keys.ACTION_LOG_PROB: torch.zeros(B, T),
            keys.POLICY_VERSION: torch.zeros(B, T, dtype=torch.int64),
            keys.NEXT: {
                keys.OBSERVATION: torch.randn(B, T, 4),
                keys.STEP_REWARD: torch.ones(B, T),
                keys.STEP_DONE: torch.zeros(B, T, dtype=torch.bool),
                keys.STEP_TERMINATED: torch.zeros(B, T, dtype=torch.bool),
            },
        },
        batch_size=[B, T],
    )
    assert check_trajectory(traj, (4,)) is None and finite_rows(traj).all()
    traj[keys.REWARD][1, 2] = float("nan")
    assert check_trajectory(traj, (4,)) == "non-finite reward"
    assert finite_rows(traj).tolist() == [True, False, True]


APEX = ["apex", "--experiment", "debug", "--logger", "none", "--max-time-s", "25"]


@pytest.mark.timeout(150)
def test_a_nan_reward_into_apex_is_refused_and_counted_and_resume_trains(tmp_path, jobs):
    """Actor rank 2 puts one NaN reward into its third unroll: its n-step returns and initial
    priorities are NaN; the shard refuses that insert, the learner counts it, every loss stays finite,
    and ``--resume`` trains on from the checkpoint (whose sum tree is finite)."""
    run, log = tmp_path / "run", tmp_path / "faults.jsonl"
    env = child_env(DISTRL_FAULT="nan_reward@2:3", DISTRL_FAULT_LOG=str(log))
    proc = jobs.train([*APEX, "--run-dir", str(run), "--total-frames", "2500"], env=env, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert log.read_text().count('"nan_reward"') == 1
    assert "rejected an insert holding a NaN or inf" in out
    first = read_summary(run)
    assert first["counters"]["rejected_nonfinite_inserts"] >= 1, first["counters"]
    losses = [row["learner/loss"] for row in read_metrics(run) if "learner/loss" in row]
    assert losses and all(torch.isfinite(torch.tensor(losses))), losses
    resumed = jobs.train(
        [*APEX, "--run-dir", str(run), "--resume", "--total-frames", "3500"], env=child_env(), timeout=120
    )
    out = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0 and "[learner] resumed from update" in out, out[-3000:]
    assert read_summary(run)["learner_updates"] > first["learner_updates"]


@pytest.mark.timeout(120)
def test_infinite_gradients_of_finite_losses_are_skipped_counted_and_never_checkpointed(tmp_path, jobs):
    """``inf_grad@0:5``: the gradients of updates 5 to 14 are infinite (each retried step goes
    through): ten updates skipped and counted, the run ends normally, and its checkpoint (model
    and optimizer state) is all finite."""
    run = tmp_path / "run"
    args = ["impala", "--experiment", "debug", "--logger", "none", "--run-dir", str(run)]
    env = child_env(DISTRL_FAULT="inf_grad@0:5")
    proc = jobs.train([*args, "--total-frames", "16000", "--max-time-s", "40"], env=env, timeout=100)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert out.count("[fault] injecting inf_grad") == 10
    s = read_summary(run)
    assert s["counters"]["skipped_nonfinite_updates"] == 10 and s["stop_reason"] != "nonfinite_loss"
    assert s["learner_updates"] > 15
    from distrl.runtime.checkpoint import load_latest_checkpoint

    state = load_latest_checkpoint(run)
    tensors = list(state["model"].values()) + [
        t for per_param in state["optim"]["state"].values() for t in per_param.values() if t.is_floating_point()
    ]
    assert tensors and all(torch.isfinite(t).all() for t in tensors)
