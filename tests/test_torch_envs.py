"""The torch-native batched envs against gymnasium's own implementations, and against TorchRL.

The reference is gymnasium itself: for every env and step, each torch env's state is copied
into ``gym.make(id).unwrapped``, the same action is applied there, and next observation,
state, reward and termination are compared. States are mixed with random draws over the
whole state space each step so that terminations, clipping and the auto-reset happen often.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import gymnasium as gym
import numpy as np
import pytest
import torch
from torchrl.collectors import Collector
from torchrl.envs import StepCounter, TransformedEnv
from torchrl.envs.utils import check_env_specs

from distrl.envs.torch_envs import (
    TORCH_ENV_IDS,
    TorchBatchedEnv,
    acrobot_step,
    cartpole_step,
    make_torch_env,
    mountain_car_continuous_step,
    mountain_car_step,
    pendulum_step,
)

CARTPOLE_THETA = 12 * 2 * math.pi / 360
#: The classic-control ids; the MinAtar games (image observations) have tests/test_torch_minatar.py.
CLASSIC_IDS = tuple(i for i in TORCH_ENV_IDS if not i.startswith("MinAtar/"))


@dataclass(frozen=True)
class Case:
    """How to drive one env id in the comparison against gymnasium."""

    n_actions: int  # 0 for continuous envs
    action_high: float  # continuous envs: the action bound
    # Random states over the whole reachable state space, [B, S] float64 from uniform [B, S].
    wide_state: Callable[[torch.Tensor], torch.Tensor]
    # Distance of a gymnasium next state [S] from the termination boundary: where the two
    # implementations may round to different sides.
    margin: Callable[[np.ndarray], float]
    # Components of the state that are angles (compared modulo 2 pi).
    angles: tuple[int, ...] = ()
    # Gymnasium mixes float32 into its float64 arithmetic: MountainCarContinuous keeps its
    # state as float32, Pendulum computes the torque terms in the action's float32.
    gym_float32_arithmetic: bool = False


def _box(low: list[float], high: list[float]) -> Callable[[torch.Tensor], torch.Tensor]:
    lo, hi = torch.tensor(low, dtype=torch.float64), torch.tensor(high, dtype=torch.float64)
    return lambda u: lo + (hi - lo) * u


CASES = {
    "CartPole-v1": Case(
        2,
        0.0,
        _box([-2.4, -3, -CARTPOLE_THETA, -3], [2.4, 3, CARTPOLE_THETA, 3]),
        lambda s: min(abs(abs(s[0]) - 2.4), abs(abs(s[2]) - CARTPOLE_THETA)),
    ),
    "Acrobot-v1": Case(
        3,
        0.0,
        _box([-math.pi, -math.pi, -4 * math.pi, -9 * math.pi], [math.pi, math.pi, 4 * math.pi, 9 * math.pi]),
        lambda s: abs(-math.cos(s[0]) - math.cos(s[1] + s[0]) - 1.0),
        angles=(0, 1),
    ),
    "MountainCar-v0": Case(3, 0.0, _box([-1.2, -0.07], [0.6, 0.07]), lambda s: min(abs(s[0] - 0.5), abs(s[1]))),
    "MountainCarContinuous-v0": Case(
        0,
        1.0,
        _box([-1.2, -0.07], [0.6, 0.07]),
        lambda s: min(abs(s[0] - 0.45), abs(s[1])),
        gym_float32_arithmetic=True,
    ),
    "Pendulum-v1": Case(
        0, 2.0, _box([-3 * math.pi, -8], [3 * math.pi, 8]), lambda s: math.inf, gym_float32_arithmetic=True
    ),
}


def _actions(case: Case, n: int, gen: torch.Generator) -> torch.Tensor:
    """Random actions ``[B]`` (discrete) or ``[B, 1]``; continuous ones overshoot the bounds
    by half, to exercise clipping."""
    if case.n_actions:
        return torch.randint(case.n_actions, (n,), generator=gen)
    return (torch.rand(n, 1, generator=gen) * 3 - 1.5) * case.action_high


def _gym_step(gym_env, env_id: str, state: np.ndarray, action: torch.Tensor):
    """One step of gymnasium's env from ``state``; returns (obs, state, reward, terminated)."""
    unwrapped = gym_env.unwrapped
    unwrapped.state = state.copy()
    if env_id == "CartPole-v1":
        # Otherwise a second termination in a row pays 0, gymnasium's "stepped past the end".
        unwrapped.steps_beyond_terminated = None
    # continuous actions clipped to the action space, as distrl's gymnasium backends do
    space = unwrapped.action_space
    gym_action = int(action) if action.ndim == 0 else action.numpy().astype(np.float32).clip(space.low, space.high)
    obs, reward, terminated, truncated, _ = unwrapped.step(gym_action)
    assert not truncated  # the unwrapped env leaves time limits to TimeLimit
    next_state = np.asarray(unwrapped.state, dtype=np.float64)
    return obs, next_state, float(reward), bool(terminated)


def _angle_diff(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.remainder(a - b + math.pi, 2 * math.pi) - math.pi


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("env_id", CLASSIC_IDS)
def test_step_for_step_against_gymnasium(env_id: str, dtype: torch.dtype):
    case = CASES[env_id]
    num_envs, steps, limit = 24, 100, 30
    env = make_torch_env(env_id, num_envs, seed=3, max_episode_steps=limit, dtype=dtype)
    gym_env = gym.make(env_id)
    gym_env.reset(seed=0)
    gen = torch.Generator().manual_seed(4)
    # Observations and rewards are float32 whatever the dtype: 1e-6 is a few float32 ulps.
    f64 = dtype == torch.float64
    tol = dict(rtol=1e-6, atol=1e-6) if f64 else dict(rtol=1e-4, atol=1e-4)
    state_tol = dict(rtol=1e-9, atol=1e-9) if f64 and not case.gym_float32_arithmetic else tol
    boundary = 1e-9 if f64 else 1e-4
    env.reset_all()
    since_reset = torch.zeros(num_envs, dtype=torch.int64)
    n_terminated = 0
    for _ in range(steps):
        # A quarter of the envs jump to random states (the step counter runs on).
        state = env.sim_state
        jump = torch.rand(num_envs, generator=gen) < 0.25
        wide = case.wide_state(torch.rand(state.shape, generator=gen, dtype=torch.float64))
        env.sim_state = torch.where(jump[:, None], wide.to(dtype), state)
        state = env.sim_state
        action = _actions(case, num_envs, gen)
        next_obs, reward, terminated, truncated, obs_after = env.step_autoreset(action)
        after = env.sim_state

        ref = [_gym_step(gym_env, env_id, state[i].double().numpy(), action[i]) for i in range(num_envs)]
        ref_obs = torch.from_numpy(np.stack([r[0] for r in ref]))
        ref_state = torch.from_numpy(np.stack([r[1] for r in ref]))
        ref_reward = torch.tensor([r[2] for r in ref], dtype=torch.float32)
        ref_term = torch.tensor([r[3] for r in ref])

        torch.testing.assert_close(next_obs, ref_obs, **tol)
        torch.testing.assert_close(reward[:, 0], ref_reward, **tol)
        flipped = (terminated[:, 0] != ref_term).nonzero().flatten().tolist()
        for i in flipped:
            assert case.margin(ref_state[i].numpy()) < boundary, (i, ref_state[i])
        n_terminated += int(ref_term.sum())

        since_reset += 1
        assert torch.equal(truncated[:, 0], since_reset >= limit)
        done = terminated[:, 0] | truncated[:, 0]
        since_reset[done] = 0
        assert torch.equal(env.elapsed_steps, since_reset)

        # Envs that go on hold gymnasium's next state; finished envs start afresh.
        keep = ~done
        diff = after[keep].double() - ref_state[keep]
        for k in case.angles:
            diff[:, k] = _angle_diff(after[keep, k].double(), ref_state[keep, k])
        torch.testing.assert_close(diff, torch.zeros_like(diff), **state_tol)
        assert torch.equal(obs_after[keep], next_obs[keep])
        assert torch.equal(obs_after, env.observe(after).float())
        low, high = env._reset_low, env._reset_high
        assert ((after[done] >= low) & (after[done] <= high)).all()
    if case.n_actions or env_id == "MountainCarContinuous-v0":
        assert n_terminated > 0, "the comparison never crossed an episode end"


@pytest.mark.parametrize("env_id", CLASSIC_IDS)
def test_time_limits_and_reset_distribution_match_gymnasium(env_id: str):
    env = make_torch_env(env_id, 4096, seed=0)
    spec = gym.spec(env_id)
    assert env.max_episode_steps == spec.max_episode_steps
    # Reset states: the same box as gymnasium's reset draws, and filling it.
    gym_env = gym.make(env_id).unwrapped
    ref = np.stack([_reset_state(gym_env, s) for s in range(300)])
    ours = env.sim_state.double().numpy()
    slack = 0.05 * (ref.max(0) - ref.min(0)).max()
    assert (ours.min(0) >= ref.min(0) - slack).all() and (ours.max(0) <= ref.max(0) + slack).all()
    assert np.allclose(ours.min(0), ref.min(0), atol=slack)
    assert np.allclose(ours.max(0), ref.max(0), atol=slack)


def _reset_state(gym_env, seed: int) -> np.ndarray:
    gym_env.reset(seed=seed)
    return np.asarray(gym_env.state, dtype=np.float64)


def test_truncation_through_torchrl_matches_gymnasium_time_limit():
    # Pendulum never terminates, so only the time limit ends its episodes.
    gym_env = gym.make("Pendulum-v1")
    gym_env.reset(seed=0)
    truncated_at = next(t for t in range(1, 1000) if gym_env.step(np.zeros(1, np.float32))[3])
    env = make_torch_env("Pendulum-v1", 4, seed=0)
    data = env.rollout(truncated_at + 5, break_when_any_done=False)
    truncated = data["next", "truncated"][..., 0]
    assert truncated_at == 200
    assert truncated[:, truncated_at - 1].all()
    assert not truncated[:, : truncated_at - 1].any() and not truncated[:, truncated_at:].any()
    assert torch.equal(data["next", "done"], data["next", "truncated"])


def test_cartpole_truncates_at_500_when_it_does_not_fall():
    env = make_torch_env("CartPole-v1", 8, seed=0)
    env.reset_all()
    zeros = torch.zeros(8, 4)
    for t in range(1, 503):
        env.sim_state = zeros  # held upright: never terminates
        _, _, terminated, truncated, _ = env.step_autoreset(torch.ones(8, dtype=torch.long))
        assert not terminated.any()
        assert truncated.all() == (t == 500) and truncated.any() == (t == 500)


@pytest.mark.parametrize("env_id", CLASSIC_IDS)
def test_check_env_specs(env_id: str):
    env = make_torch_env(env_id, 5, seed=0)
    check_env_specs(env, seed=0)
    assert env.observation_spec["observation"].dtype == torch.float32
    assert env.reward_spec.shape == (5, 1)
    for key in ("done", "terminated", "truncated"):
        assert env.full_done_spec[key].shape == (5, 1)
        assert env.full_done_spec[key].dtype == torch.bool
    if CASES[env_id].n_actions:
        assert env.action_spec.shape == (5,) and env.action_spec.dtype == torch.int64
        assert env.action_spec.space.n == CASES[env_id].n_actions
    else:
        assert env.action_spec.shape == (5, 1)
        assert env.action_spec.space.high.max().item() == CASES[env_id].action_high


@pytest.mark.parametrize("env_id", CLASSIC_IDS)
def test_step_autoreset_equals_step_and_maybe_reset(env_id: str):
    case = CASES[env_id]
    num_envs = 16
    torchrl_env = make_torch_env(env_id, num_envs, seed=11, max_episode_steps=13)
    lean_env = make_torch_env(env_id, num_envs, seed=11, max_episode_steps=13)
    gen = torch.Generator().manual_seed(0)
    td = torchrl_env.reset()
    assert torch.equal(td["observation"], lean_env.reset_all())
    n_done = 0
    for _ in range(40):
        action = _actions(case, num_envs, gen)
        td["action"] = action
        out, td = torchrl_env.step_and_maybe_reset(td)
        next_obs, reward, terminated, truncated, obs_after = lean_env.step_autoreset(action)
        assert torch.equal(out["next", "observation"], next_obs)
        assert torch.equal(out["next", "reward"], reward)
        assert torch.equal(out["next", "terminated"], terminated)
        assert torch.equal(out["next", "truncated"], truncated)
        assert torch.equal(td["observation"], obs_after)
        n_done += int(out["next", "done"].sum())
    assert n_done >= num_envs  # at least the time limit ended every episode once


def test_step_and_maybe_reset_resets_only_finished_envs():
    env = make_torch_env("CartPole-v1", 64, seed=0, max_episode_steps=15)
    td = env.reset()
    gen = torch.Generator().manual_seed(0)
    seen_partial = False
    for _ in range(30):
        before = env.elapsed_steps
        td["action"] = torch.randint(2, (64,), generator=gen)
        out, td = env.step_and_maybe_reset(td)
        done = out["next", "done"][:, 0]
        seen_partial |= bool(done.any() and not done.all())
        assert torch.equal(td["observation"][~done], out["next", "observation"][~done])
        # Finished envs show a fresh reset state, and the final one stays in "next".
        assert (td["observation"][done].abs() <= 0.05).all()
        final = out["next", "observation"][done]
        fell = (final[:, 0].abs() > 2.4) | (final[:, 2].abs() > CARTPOLE_THETA)
        assert (fell | out["next", "truncated"][done][:, 0]).all()
        assert torch.equal(td["observation"], env.sim_state)
        assert torch.equal(env.elapsed_steps, torch.where(done, 0, before + 1))
        assert not td["done"].any()
    assert seen_partial


def test_partial_reset_mask_through_reset():
    env = make_torch_env("Acrobot-v1", 6, seed=0)
    td = env.reset()
    for _ in range(3):
        td["action"] = torch.full((6,), 2)
        td = env.step(td)["next"].clone()
    state, elapsed = env.sim_state, env.elapsed_steps
    mask = torch.tensor([True, False, False, True, False, True])
    td["_reset"] = mask[:, None]
    out = env.reset(td)
    after = env.sim_state
    assert torch.equal(after[~mask], state[~mask])
    assert not torch.isclose(after[mask], state[mask]).all(-1).any()
    assert (after[mask].abs() <= 0.1).all()
    assert torch.equal(env.elapsed_steps, torch.where(mask, 0, elapsed))
    assert torch.equal(out["observation"], env.observe(after).float())


def test_observations_do_not_alias_the_simulator_state():
    env = make_torch_env("CartPole-v1", 4, seed=0)
    for obs in (env.reset_all(), env.reset()["observation"], env.rand_step(env.reset())["next", "observation"]):
        state = env.sim_state
        obs.add_(1.0)  # a careless in-place normalisation downstream
        assert torch.equal(env.sim_state, state)


def test_seeding_is_reproducible():
    def run(env: TorchBatchedEnv) -> list[torch.Tensor]:
        outs = [env.reset_all()]
        for t in range(60):
            outs += env.step_autoreset(torch.full((32,), t % 2))
        return outs

    first = run(make_torch_env("CartPole-v1", 32, seed=7))
    again = run(make_torch_env("CartPole-v1", 32, seed=7))
    other = run(make_torch_env("CartPole-v1", 32, seed=8))
    reseeded_env = make_torch_env("CartPole-v1", 32, seed=123)
    reseeded_env.set_seed(7)
    reseeded = run(reseeded_env)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert all(torch.equal(a, b) for a, b in zip(first, reseeded))
    assert not torch.equal(first[0], other[0])

    # Through TorchRL: same seed, same rollout (the random policy has its own seed).
    rollouts = []
    for _ in range(2):
        torch.manual_seed(0)
        rollouts.append(make_torch_env("Pendulum-v1", 4, seed=5).rollout(30))
    assert (rollouts[0] == rollouts[1]).all()


def test_transforms_rollout_and_collector():
    env = TransformedEnv(make_torch_env("CartPole-v1", 8, seed=0, max_episode_steps=20), StepCounter())
    data = env.rollout(50, break_when_any_done=False)
    assert data.shape == (8, 50)
    steps = data["next", "step_count"][..., 0]
    done = data["next", "done"][..., 0]
    assert (steps <= 20).all() and ((steps == 20) <= done).all()

    for env_id in ("CartPole-v1", "Pendulum-v1"):
        collector = Collector(
            make_torch_env(env_id, 16, seed=0), policy=None, frames_per_batch=16 * 8, total_frames=16 * 8
        )
        try:
            batches = list(collector)
        finally:
            collector.shutdown()
        assert len(batches) == 1 and batches[0].shape == (16, 8)
        assert batches[0]["next", "reward"].shape == (16, 8, 1)


@pytest.mark.parametrize(
    "step, state_size, action",
    [
        (cartpole_step, 4, torch.tensor([0, 1, 1])),
        (acrobot_step, 4, torch.tensor([0, 1, 2])),
        (mountain_car_step, 2, torch.tensor([0, 1, 2])),
        (mountain_car_continuous_step, 2, torch.tensor([[-2.0], [0.3], [1.0]])),
        (pendulum_step, 2, torch.tensor([[-2.5], [0.3], [1.0]])),
    ],
)
def test_pure_dynamics_trace_without_graph_breaks(step, state_size, action):
    # fullgraph=True fails on any data-dependent Python branch or host read; the eager
    # backend checks the trace without paying for code generation.
    state = torch.rand(3, state_size) * 0.2 - 0.1
    compiled = torch.compile(step, fullgraph=True, backend="eager")
    for got, want in zip(compiled(state, action), step(state, action)):
        assert torch.equal(got, want)


def test_unknown_id_and_bad_arguments():
    with pytest.raises(ValueError, match="CartPole-v1") as err:
        make_torch_env("HalfCheetah-v5", 4)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError):
        make_torch_env("CartPole-v1", 0)
    with pytest.raises(ValueError):
        make_torch_env("CartPole-v1", 4, max_episode_steps=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("env_id", CLASSIC_IDS)
def test_cuda_matches_cpu(env_id: str):
    case = CASES[env_id]
    cpu = make_torch_env(env_id, 256, seed=0, dtype=torch.float64)
    cuda = make_torch_env(env_id, 256, device="cuda", seed=0, dtype=torch.float64)
    check_env_specs(cuda)
    cuda.reset_all()
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        cpu.sim_state = cuda.sim_state.cpu()
        action = _actions(case, 256, gen)
        ours = cuda.step_autoreset(action.cuda())
        ref = cpu.dynamics(cpu.sim_state, action)
        torch.testing.assert_close(ours[0].cpu(), cpu.observe(ref[0]).float())
        torch.testing.assert_close(ours[1][:, 0].cpu(), ref[1].float())
    assert all(t.device.type == "cuda" for t in ours)
    moved = make_torch_env(env_id, 8, seed=0).to("cuda")
    check_env_specs(moved)
    moved.reset_all()
    assert all(t.device.type == "cuda" for t in moved.step_autoreset(_actions(case, 8, gen).cuda()))


def test_mountain_car_continuous_charges_the_clipped_action_on_every_backend():
    """An action of 3.0 costs 0.1 * 1.0**2 (the clipped action) on the native env, through the
    TorchRL path and through gymnasium: one config trains on one reward whatever the backend."""
    from distrl.envs.batched import gym_vector_env, make_batched_env, torchrl_native_env

    env_id, cpu = "MountainCarContinuous-v0", torch.device("cpu")
    backends = {
        "native": make_batched_env(env_id, 4, cpu, 0),
        "torchrl": make_batched_env(env_id, 4, cpu, 0, "distrl.envs.batched:torchrl_native_env"),
        "gymnasium": gym_vector_env(env_id, 4, cpu, 0),
    }
    assert torchrl_native_env  # the factory the torchrl row names
    action = torch.tensor([[3.0], [-3.0], [0.5], [1.0]])
    for name, env in backends.items():
        env.reset()
        reward = env.step(action)[1]
        torch.testing.assert_close(reward, torch.tensor([-0.1, -0.1, -0.025, -0.1]), rtol=0, atol=1e-6, msg=name)
        env.close()
