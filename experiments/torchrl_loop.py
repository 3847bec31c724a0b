"""A plain TorchRL training loop fed by a distrl fleet (docs/torchrl.md, door 3).

TorchRL's ``ClipPPOLoss`` with its ``GAE`` estimator learns from the ``[B, T]`` batches of a
``distrl.FleetCollector`` (impala's actors: threads of this process, or ``--world-size N`` for
``N - 1`` actor processes over rpc); after every batch the policy's weights go back to the actors
through ``collector.update_policy_weights_()``. At the end it prints the greedy evaluation of the
last policy (distrl's evaluation: ``--eval-episodes`` episodes from seeds ``seed + 10_000 + i``).

    python -m experiments.torchrl_loop                                        # CartPole-v1
    python -m experiments.torchrl_loop --env distrl/MatchSign-v0 --total-frames 8192   # seconds

Rewards are scaled by ``--reward-scale`` (0.1) before GAE, as ``impala`` does: unscaled, CartPole's
values near 100 are far for the critic's Adam steps, and the training mean swung between 160 and 470
for most of the run (docs/torchrl.md has both).

The data is off-policy by up to a few versions (``policy_version`` on every batch says which):
the actors keep collecting with the weights they have while the loop learns, and PPO's clipped
importance ratio against the batch's ``action_log_prob`` bounds the step, as in APPO.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from tensordict.nn import TensorDictModule
from torchrl.modules import MLP, ProbabilisticActor, ValueOperator
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE

import distrl
from distrl.envs.gym import env_info, evaluate
from distrl.nn.models import clip_towers


def train(
    env: str = "CartPole-v1",
    total_frames: int = 1_000_000,
    world_size: int = 1,
    seed: int = 0,
    envs_per_actor: int = 16,
    unroll_length: int = 32,
    messages_per_batch: int = 2,
    epochs: int = 4,
    minibatch: int = 256,
    lr: float = 3e-4,
    gamma: float = 0.99,
    lmbda: float = 0.95,
    entropy_coeff: float = 0.01,
    max_grad_norm: float = 0.5,
    reward_scale: float = 0.1,
    eval_episodes: int = 10,
    log_interval_s: float = 10.0,
) -> dict:
    """Train a ``ProbabilisticActor`` over a 2x64 MLP with ``ClipPPOLoss`` from a fleet; returns
    ``{"eval_return": greedy mean, "frames", "wall_s", "fps", "train_return", "lag_mean"}``."""
    torch.manual_seed(seed)
    info = env_info(env)
    actor_net = MLP(in_features=info.obs_dim, out_features=info.num_actions, num_cells=[64, 64])
    policy = ProbabilisticActor(
        TensorDictModule(actor_net, in_keys=["observation"], out_keys=["logits"]),
        in_keys=["logits"],
        distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
    )  # writes "action_log_prob", the batches' key
    value = ValueOperator(MLP(in_features=info.obs_dim, out_features=1, num_cells=[64, 64]), in_keys=["observation"])
    advantage = GAE(gamma=gamma, lmbda=lmbda, value_network=value, average_gae=False)
    loss_fn = ClipPPOLoss(
        policy,
        value,
        clip_epsilon=0.2,
        entropy_coeff=entropy_coeff,
        critic_coeff=0.5,
        loss_critic_type="l2",
        normalize_advantage=True,
    )
    optim = torch.optim.Adam(loss_fn.parameters(), lr=lr, eps=1e-5)
    towers = [list(policy.parameters()), list(value.parameters())]  # clipped apart (distrl/nn/models.py says why)

    frames_per_batch = messages_per_batch * envs_per_actor * unroll_length
    start = last_log = time.monotonic()
    lags: list[float] = []
    with distrl.FleetCollector(
        policy,
        env=env,
        world_size=world_size,
        seed=seed,
        envs_per_actor=envs_per_actor,
        unroll_length=unroll_length,
        frames_per_batch=frames_per_batch,
        total_frames=total_frames,
        queue_size=messages_per_batch,
    ) as collector:
        for batch in collector:  # [B, T]
            lags.append(float((collector.policy_version - batch["policy_version"]).float().mean()))
            for group in optim.param_groups:  # linear decay to 0 over the budget: a settled last policy
                group["lr"] = lr * max(0.0, 1.0 - collector.frames / total_frames)
            if reward_scale != 1.0:  # values in scaled units, which the critic reaches sooner (docs/impala.md)
                batch["next", "reward"] = batch["next", "reward"] * reward_scale
            with torch.no_grad():
                advantage(batch)  # writes "advantage", "value_target", "state_value"
            flat = batch.reshape(-1)
            for _ in range(epochs):
                for idx in torch.randperm(flat.numel()).split(minibatch):
                    out = loss_fn(flat[idx])
                    loss = out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]
                    optim.zero_grad(set_to_none=True)
                    loss.backward()
                    clip_towers(towers, max_grad_norm)
                    optim.step()
            collector.update_policy_weights_()  # the policy's weights, to every actor
            now = time.monotonic()
            if now - last_log >= log_interval_s:
                last_log = now
                rets = list(collector.episode_returns)
                print(
                    f"[torchrl loop] {collector.frames:>9,} frames  {collector.frames / (now - start):7,.0f} fps  "
                    f"train return {sum(rets) / max(1, len(rets)):6.1f}  lag {sum(lags[-20:]) / len(lags[-20:]):.2f}",
                    flush=True,
                )
        frames = collector.frames
        rets = list(collector.episode_returns)
    wall = time.monotonic() - start
    returns = evaluate(actor_net, env, eval_episodes, seed + 10_000, torch.device("cpu"))
    return {
        "eval_return": sum(returns) / len(returns),
        "frames": frames,
        "wall_s": wall,
        "fps": frames / wall,
        "train_return": sum(rets) / max(1, len(rets)),
        "lag_mean": sum(lags) / max(1, len(lags)),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", default="CartPole-v1", help="gymnasium id (discrete actions)")
    ap.add_argument("--total-frames", type=int, default=1_000_000, help="frames the fleet collects")
    ap.add_argument("--world-size", type=int, default=1, help="1: actor threads here; N: N - 1 actor processes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--reward-scale", type=float, default=0.1, help="rewards are multiplied by this before GAE (1: unscaled)"
    )
    ap.add_argument("--eval-episodes", type=int, default=10)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    r = train(
        args.env,
        args.total_frames,
        args.world_size,
        args.seed,
        reward_scale=args.reward_scale,
        eval_episodes=args.eval_episodes,
    )
    print(
        f"[torchrl loop] {r['frames']:,} frames in {r['wall_s']:.1f} s ({r['fps']:,.0f} fps), lag mean "
        f"{r['lag_mean']:.2f} versions, last training return {r['train_return']:.1f}"
    )
    print(f"[torchrl loop] greedy eval over {args.eval_episodes} episodes: {r['eval_return']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
