"""One SAC update (the three losses, one backward, one Adam step) with apex's hand-written losses
(distrl/algorithms/sac.py) against TorchRL's ``SACLoss`` on the same networks: what the learner pays
per update at one update per env step.

HalfCheetah's sizes by default (17 observations, 6 actions), the mujoco preset's (256, 256) ReLU
MLPs and batch of 256, 1-step returns (``SACLoss``'s TD(0)), Adam with ``foreach`` on both sides (as
the learner builds it); ``--precision auto`` runs both sides' hidden layers in bfloat16 where the CPU
computes it natively, as the preset does (``--precision float32``, the default, does not). Times
are this process's CPU seconds (one thread by default), and the two alternate in rounds, so a
shared machine's load falls on both alike; the ratio of medians is the figure to read.

    python -m experiments.bench_sac_loss --rounds 10 --updates 50 [--precision auto]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torchrl.modules import ProbabilisticActor, TanhNormal, ValueOperator
from torchrl.objectives import SACLoss, ValueEstimators

from distrl.algorithms.sac import polyak_update, sac_loss
from distrl.config import NetConfig
from distrl.data import keys
from distrl.nn.sac import LocScale, SACNetwork


class _Q(torch.nn.Module):
    """One twin critic on the normalised observation, as TorchRL's ``ValueOperator`` calls it."""

    def __init__(self, model: SACNetwork, q: torch.nn.Module):
        super().__init__()
        self.model, self.q = model, q

    def forward(self, obs, action):
        return self.q(torch.cat([self.model.features(obs), action], -1))


def _timed(step, updates: int) -> float:
    """CPU seconds per update of this process: on a shared machine, wall time counts the others' too."""
    start = time.process_time()
    for _ in range(updates):
        step()
    return (time.process_time() - start) / updates


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--obs", type=int, default=17)
    p.add_argument("--actions", type=int, default=6)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--updates", type=int, default=50, help="updates per round and side")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--precision", default="float32", help="net.precision of both sides' networks (auto: the preset's)")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    F, A, B = a.obs, a.actions, a.batch
    net = NetConfig(hidden=(256, 256), activation="relu", precision=a.precision)
    low, high = -torch.ones(A), torch.ones(A)
    ours = SACNetwork((F,), A, low, high, net)
    target = copy.deepcopy(ours.qvalue).requires_grad_(False)
    optim = torch.optim.Adam(ours.parameters(), lr=3e-4, foreach=True)  # as the learner builds it
    batch = TensorDict(
        {
            keys.OBSERVATION: torch.randn(B, F),
            keys.ACTION: torch.rand(B, A) * 2 - 1,
            keys.NSTEP_RETURN: torch.randn(B),
            keys.BOOTSTRAP_DISCOUNT: torch.full((B,), 0.99),
            keys.NEXT_OBSERVATION: torch.randn(B, F),
            keys.PRIORITY_WEIGHT: torch.ones(B),
        },
        batch_size=[B],
    )

    def step_ours():
        out = sac_loss(ours, target, batch, -float(A))
        optim.zero_grad(set_to_none=True)
        out[keys.LOSS].backward()
        optim.step()
        polyak_update(target.parameters(), ours.qvalue.parameters(), 0.005)

    theirs = SACNetwork((F,), A, low, high, net)
    actor = ProbabilisticActor(
        TensorDictModule(LocScale(theirs), in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        distribution_kwargs={"low": low, "high": high},
        return_log_prob=True,
    )
    critics = [
        ValueOperator(_Q(theirs, q), in_keys=["observation", "action"]) for q in (theirs.qvalue.q1, theirs.qvalue.q2)
    ]
    loss = SACLoss(actor, critics, loss_function="l2", target_entropy=-float(A))
    loss.make_value_estimator(ValueEstimators.TD0, gamma=0.99)
    from torchrl.objectives import SoftUpdate

    updater = SoftUpdate(loss, tau=0.005)
    optim_theirs = torch.optim.Adam(loss.parameters(), lr=3e-4, foreach=True)
    done = torch.zeros(B, 1, dtype=torch.bool)
    td = TensorDict(
        {
            "observation": batch[keys.OBSERVATION],
            "action": batch[keys.ACTION],
            "next": {"observation": batch[keys.NEXT_OBSERVATION], "reward": batch[keys.NSTEP_RETURN][:, None],
                     "done": done, "terminated": done},
        },
        batch_size=[B],
    )  # fmt: skip

    def step_theirs():
        out = loss(td.clone(False))
        optim_theirs.zero_grad(set_to_none=True)
        (out["loss_qvalue"] + out["loss_actor"] + out["loss_alpha"]).backward()
        optim_theirs.step()
        updater.step()

    step_ours(), step_theirs()  # warm up
    times = {"distrl": [], "torchrl": []}
    for _ in range(a.rounds):
        times["distrl"].append(_timed(step_ours, a.updates))
        times["torchrl"].append(_timed(step_theirs, a.updates))
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    print(
        f"batch {B}, obs {F}, actions {A}, (256, 256) ReLU, {a.precision}, {a.threads} thread(s), "
        f"{a.rounds} rounds x {a.updates}"
    )
    for k, v in med.items():
        print(
            f"  {k:8s} {v:6.2f} CPU ms per update (median; range {min(times[k]) * 1e3:.2f}-{max(times[k]) * 1e3:.2f})"
        )
    print(f"  SACLoss + SoftUpdate / distrl: {med['torchrl'] / med['distrl']:.2f}x")


if __name__ == "__main__":
    main()
