"""Data parallelism of vecenv: 2 gloo ranks with N samples each take the update 1 rank takes on
the 2N samples, and replicas trained on different envs stay identical.

The test runs this file as a torchrun worker (``__main__`` below) in 2 processes and compares
their parameters with a one-process update computed here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from tensordict import TensorDict

from distrl.data import keys
from distrl.nn.models import ActorCritic
from distrl.recipes.vecenv.update import allreduce_gradients, normalize_advantage, ppo_update
from helpers import train_cmd

HP = SimpleNamespace(
    epochs=3,
    num_minibatches=1,
    clip_eps=0.2,
    value_coef=0.5,
    entropy_coef=0.01,
    max_grad_norm=0.5,
    allreduce_dtype="float32",
    clip_value=False,
    minibatch_adv_norm=False,
)
N = 48  # samples per rank


def fixed_batch(continuous: bool) -> TensorDict:
    """``[2N]`` samples from a fixed seed: the data both launches share."""
    g = torch.Generator().manual_seed(123)
    action = torch.randn(2 * N, 2, generator=g) if continuous else torch.randint(0, 3, (2 * N,), generator=g)
    return TensorDict(
        {
            keys.OBSERVATION: torch.randn(2 * N, 4, generator=g),
            keys.ACTION: action,
            keys.ACTION_LOG_PROB: -1.0 + 0.3 * torch.randn(2 * N, generator=g),
            keys.ADVANTAGE: 2.0 * torch.randn(2 * N, generator=g) + 0.5,  # raw: normalized in update_on
            keys.VALUE_TARGET: torch.randn(2 * N, generator=g),
        },
        [2 * N],
    )


def update_on(batch: TensorDict, continuous: bool) -> torch.Tensor:
    """One PPO update (3 epochs, Adam) from a fixed initialisation; the flat parameters after it."""
    torch.manual_seed(0)
    model = ActorCritic(4, None, action_dim=2) if continuous else ActorCritic(4, 3)
    optim = torch.optim.Adam(model.parameters(), lr=1e-2, eps=1e-5)
    batch = batch.clone()
    batch[keys.ADVANTAGE] = normalize_advantage(batch[keys.ADVANTAGE])
    ppo_update(model, optim, batch, HP)
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach()


def reduction_order_noise(continuous: bool) -> float:
    """How far a correct reduction may land from :func:`update_on` of the whole batch: the largest
    parameter difference between one-rank updates of the same batch with its rows in another
    order. The math is the same; only the order of the float32 sums differs (as when two ranks
    sum halves and all-reduce), carried through three Adam epochs. Measured here, so it holds on
    any machine: 0.2-1.1e-6 on the reference machine, where the two-rank result differed by 1.5e-6."""
    batch, g = fixed_batch(continuous), torch.Generator().manual_seed(0)
    ref = update_on(batch, continuous)
    return max(
        float((update_on(batch[torch.randperm(2 * N, generator=g)], continuous) - ref).abs().max()) for _ in range(3)
    )


@pytest.mark.timeout(210)
def test_two_ranks_take_the_one_rank_update_and_stay_identical(tmp_path, jobs):
    # this file under torchrun (helpers.train_cmd builds launch/train.py's command only)
    job = jobs.start(train_cmd([tmp_path], nproc=2, script=Path(__file__)))
    assert job.wait(150) == 0, job.tail()
    for continuous in (False, True):
        one_rank = update_on(fixed_batch(continuous), continuous)
        ranks = [torch.load(tmp_path / f"fixed_{continuous}_{r}.pt") for r in range(2)]
        assert torch.equal(ranks[0], ranks[1])  # bitwise: both stepped on the same reduced gradient
        # tolerance: 4x the reduction-order noise, at least 16 float32 ulps of the largest parameter
        eps = torch.finfo(torch.float32).eps
        atol = max(4 * reduction_order_noise(continuous), 16 * eps * float(one_rank.abs().max()))
        # a wrong reduction (a rank's half alone, a sum for a mean) lands thousands of times further
        wrong = float((update_on(fixed_batch(continuous)[:N], continuous) - one_rank).abs().max())
        assert wrong > 100 * atol, (wrong, atol)
        torch.testing.assert_close(ranks[0], one_rank, atol=atol, rtol=0)
    trained = [torch.load(tmp_path / f"trained_{r}.pt") for r in range(2)]
    assert torch.equal(trained[0]["params"], trained[1]["params"])  # replicas identical after training
    assert not torch.equal(trained[0]["first_obs"], trained[1]["first_obs"])  # on different envs (seeded by rank)
    assert (tmp_path / "run" / "summary.json").exists()
    # bytes per env step: 4 epochs x 2 minibatches of the bfloat16 gradient per 2 x 16 x 8 frames
    assert trained[0]["bytes"] == 4 * 2 * trained[0]["numel"] * 2 / (2 * 16 * 8)
    # the bfloat16 wire: the same mean on both ranks, within two bfloat16 roundings of the exact one
    g0, g1 = (rank_gradient(r) for r in range(2))
    bf16 = [torch.load(tmp_path / f"bf16_{r}.pt") for r in range(2)]
    assert torch.equal(bf16[0], bf16[1])
    err = (bf16[0] - (g0 + g1) / 2).abs()
    assert (err <= 2.0**-7 * (g0.abs() + g1.abs()) / 2).all(), float(err.max())
    assert not torch.equal(bf16[0], (g0 + g1) / 2)  # it did go through bfloat16


def rank_gradient(rank: int) -> torch.Tensor:
    """A fixed ``[1000]`` gradient for ``rank``, spread over six decades."""
    g = torch.Generator().manual_seed(7 + rank)
    return torch.randn(1000, generator=g) * 10.0 ** torch.randint(-4, 2, (1000,), generator=g)


def _worker(out: Path) -> None:
    """Under torchrun: the fixed-batch update on this rank's half, then a short real training run."""
    import torch.distributed as dist

    from distrl.recipes import get_recipe
    from distrl.runtime.context import RoleContext
    from distrl.config import override
    from distrl.recipes.vecenv.learner import VecEnvLearner

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for continuous in (False, True):
        half = fixed_batch(continuous)[rank * N : (rank + 1) * N]
        torch.save(update_on(half, continuous), out / f"fixed_{continuous}_{rank}.pt")

    param = torch.nn.Parameter(torch.zeros(1000))
    param.grad = rank_gradient(rank)
    allreduce_gradients([param], torch.bfloat16)
    torch.save(param.grad.clone(), out / f"bf16_{rank}.pt")

    cfg = override(
        get_recipe("vecenv").default_config(),
        **{
            "run.logger": "none",
            "run.eval_episodes": 2,
            "run.total_frames": 3 * 2 * 16 * 8,
            "run.target_return": None,
            "algo.num_envs": 16,
            "algo.rollout_length": 8,
            "algo.num_minibatches": 2,
            "net.obs_norm": "on",
            "algo.allreduce_dtype": "bfloat16",
        },
    )
    (out / "run").mkdir(exist_ok=True)
    learner = VecEnvLearner(RoleContext(cfg, None, rank, {0: "learner", 1: "learner"}, out / "run"))
    first_obs = learner.env.reset().clone()
    learner.run()
    params = torch.cat([v.detach().flatten().double() for v in learner.model.state_dict().values()])  # + obs stats
    numel = sum(p.numel() for p in learner.model.parameters() if p.requires_grad)
    torch.save(
        {"params": params, "first_obs": first_obs, "numel": numel, "bytes": learner.bytes_per_env_step},
        out / f"trained_{rank}.pt",
    )
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    _worker(Path(sys.argv[1]))
