"""Benchmark: the cost of one APPO learner update (sf's) on its default ``[64, 32]`` CartPole
batch, whole and by part, and what each of distrl's replacements saves against the stock call.

    python -m experiments.bench_learner [--batch 64] [--unroll 32] [--repeats 200]

One process, one thread, in this order (compare within one run: the machines are shared); every
figure is the median wall time of one call after ten left out (``experiments/kit/measure.py``'s
``median_wall_ms``: a median, so a burst of load from other jobs moves it less than a mean):
1. the update as sf's learner makes it (loss, backward, per-tower clip, Adam), and its parts;
2. the stock calls beside distrl's: ``nn.Tanh`` against :class:`distrl.nn.models.Tanh` (the MLP
   forward), TorchRL's ``vtrace_advantage_estimate`` against :func:`distrl.algorithms.estimators.vtrace_targets`,
   ``Adam`` with its CPU default (a Python loop over the tensors) against ``fused=True``.
"""

from __future__ import annotations

import argparse

import torch
from tensordict import TensorDict
from torch import nn
from torchrl.objectives.value.functional import vtrace_advantage_estimate

from distrl.algorithms.appo import appo_loss
from distrl.algorithms.estimators import vtrace_targets
from distrl.data import keys
from distrl.nn.models import ActorCritic, Tanh, clip_towers
from distrl.recipes.sf.recipe import SFConfig
from experiments.kit.measure import median_wall_ms as median_ms, one_thread


def cartpole_batch(B: int, T: int, g: torch.Generator) -> TensorDict:
    """A ``[B, T]`` batch of sf's keys with CartPole's shapes (episode ends at 2% of the steps)."""
    done = torch.rand(B, T, 1, generator=g) < 0.02
    return TensorDict(
        {
            keys.OBSERVATION: torch.randn(B, T, 4, generator=g),
            keys.ACTION: torch.randint(0, 2, (B, T), generator=g),
            keys.ACTION_LOG_PROB: -torch.rand(B, T, generator=g) - 0.5,
            keys.NEXT: TensorDict(
                {
                    keys.OBSERVATION: torch.randn(B, T, 4, generator=g),
                    "reward": torch.ones(B, T, 1),
                    "done": done,
                    "terminated": done.clone(),
                },
                batch_size=[B, T],
            ),
        },
        batch_size=[B, T],
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=64, help="trajectories per update (sf's algo.batch_size)")
    ap.add_argument("--unroll", type=int, default=32, help="steps per trajectory (algo.unroll_length)")
    ap.add_argument("--repeats", type=int, default=200)
    args = ap.parse_args()
    one_thread()
    g = torch.Generator().manual_seed(0)
    batch, algo = cartpole_batch(args.batch, args.unroll, g), SFConfig()
    model = ActorCritic(4, 2)
    optim = torch.optim.Adam(model.parameters(), lr=1e-9, eps=1e-5, fused=True)
    rows = args.batch * args.unroll

    def update():
        out = appo_loss(model, batch, algo)
        optim.zero_grad(set_to_none=True)
        out["loss"].backward()
        clip_towers(model.tower_parameters(), algo.max_grad_norm)
        optim.step()

    def backward():
        optim.zero_grad(set_to_none=True)
        appo_loss(model, batch, algo)["loss"].backward()

    total = median_ms(update, args.repeats)
    print(
        f"sf learner update on [{args.batch}, {args.unroll}] ({rows} rows), median wall time: {total:.2f} ms "
        f"({1e3 * total / rows:.2f} us a frame)"
    )
    loss_ms = median_ms(lambda: appo_loss(model, batch, algo), args.repeats)
    print(
        f"  loss (forward, V-trace, PPO terms): {loss_ms:.2f} ms; with backward "
        f"{median_ms(backward, args.repeats):.2f} ms"
    )
    print(
        f"  clip per tower + Adam step: "
        f"{median_ms(lambda: (clip_towers(model.tower_parameters(), 1.0), optim.step()), args.repeats):.2f} ms"
    )

    obs = batch[keys.OBSERVATION]
    with torch.no_grad():
        print("stock call against distrl's (ms, median wall time):")
        ours = median_ms(lambda: model(obs), args.repeats)
        stock = ActorCritic(4, 2)
        for mlp in (stock.policy, stock.value):
            for i, m in enumerate(mlp):
                if isinstance(m, Tanh):
                    mlp[i] = nn.Tanh()
        print(f"  MLP forward, nn.Tanh {median_ms(lambda: stock(obs), args.repeats):.2f} | distrl Tanh {ours:.2f}")
        lp, lm = (
            -torch.rand(args.batch, args.unroll, 1, generator=g),
            -torch.rand(args.batch, args.unroll, 1, generator=g),
        )
        v, vn = (
            torch.randn(args.batch, args.unroll, 1, generator=g),
            torch.randn(args.batch, args.unroll, 1, generator=g),
        )
        r, d = batch[keys.REWARD], batch[keys.DONE]
        torchrl_ms = median_ms(
            lambda: vtrace_advantage_estimate(0.99, lp, lm, v, vn, r, d, d, time_dim=-2), args.repeats
        )
        ours_ms = median_ms(lambda: vtrace_targets(0.99, lp, lm, v, vn, r, d, d), args.repeats)
        print(f"  V-trace, TorchRL's {torchrl_ms:.2f} | distrl's {ours_ms:.2f}")
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    for name, kw in (("CPU default", {}), ("fused", {"fused": True})):
        opt = torch.optim.Adam(model.parameters(), lr=1e-9, eps=1e-5, **kw)
        print(f"  Adam step, {name}: {median_ms(opt.step, args.repeats):.2f}")


if __name__ == "__main__":
    main()
