"""The torch-native MinAtar games against the ``minatar`` package, and against TorchRL.

Lockstep replay. A torch env draws all its randomness from one stream (``grid.py``): per step
``u = last_draws`` ``[B, 1 + G + R]`` float32, column 0 the step's sticky-action draw, columns
1..G the draws the game may make in the step (each potential draw its own column, used or not),
the last R columns the draws of the reset that follows if the env finishes (after ``reset_all``:
that reset's). Each package env (``minatar.gym.BaseEnv``, the ``-v1`` minimal action set) gets a
:class:`ReplayRandom` in place of its numpy ``RandomState``, as ``Environment.random`` (sticky
actions) and as the game's ``Env.random`` (its own draws), one object for both. It answers the
package's calls for env ``i`` from the torch env's draws of env ``i`` at that step (``n *`` and
``k + n *`` are computed in float64 and truncated, as the package's ``int(n * u)``; a call with
``size=n`` takes ``n`` consecutive columns):

    Environment.act:   random.rand()      -> u[i, 0]               (sticky iff < 0.1)
    Breakout.reset:    random.randint(2)  -> int(2 * u[i, 1])      (0: ball on the left wall)
    SpaceInvaders:     draws nothing of its own (G = R = 0)
    Asterix.act, when spawn_timer == 0 (G = 3, R = 0):
                       random.rand()      -> u[i, 1]               (from the left iff < 1/2)
                       random.rand()      -> u[i, 2]               (gold iff < 1/3)
                       random.randint(n)  -> int(n * u[i, 3])      (only if n, the free slots, > 0)
    Freeway.act, on the step that reaches the top (G = 16, R = 16):
                       random.randint(1, 6, 8) -> 1 + int(5 * u[i, 1:9])   (car speeds)
                       random.rand(8)     -> u[i, 9:17]            (direction: sign(u - 1/2))
    Freeway.reset:     the same two calls -> u[i, 17:25], u[i, 25:33]
    Seaquest.act (G = 5, R = 0), when e_spawn_timer == 0:
                       random.rand()      -> u[i, 1]               (from the left iff < 1/2)
                       random.rand()      -> u[i, 2]               (a sub iff < 1/3, else a fish)
                       random.randint(1, 9) -> 1 + int(8 * u[i, 3])  (the row)
                       and when d_spawn_timer == 0 (a diver):
                       random.rand()      -> u[i, 4]               (from the left iff < 1/2)
                       random.randint(1, 9) -> 1 + int(8 * u[i, 5])  (the row)

(``u`` is float32; the package gets it as a Python float, exactly, and compares it with 0.1 in
float64, which the torch env reproduces exactly; ``2 * u`` is exact in both. The test decides
from the package's state before the step, and the executed action, which of a step's potential
draws the package makes: ``Game.step_calls``.)

The replay is strict: the test queues each answer with the method that must ask for it, right
before the package call that must consume it, and checks the queue is empty afterwards: a draw
the package makes that the torch env does not (or the reverse), a draw moved by one step or
answered from the wrong column fails at once, or at the latest where the games diverge.
Everything is compared on every step and env: observations (before and after the auto-reset),
rewards, terminations, truncations (the test keeps its own time limit for the package, which
has none), the executed action, and the whole game state against the package's attributes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from torchrl.envs.utils import check_env_specs

from distrl.envs.torch_envs import TORCH_ENV_IDS, TorchGridEnv, make_torch_env
from distrl.envs.torch_envs.minatar_breakout import BreakoutState
from distrl.envs.torch_envs.minatar_space_invaders import SpaceInvadersState

minatar_gym = pytest.importorskip("minatar.gym")

BREAKOUT, SPACE_INVADERS = "MinAtar/Breakout-v1", "MinAtar/SpaceInvaders-v1"
IDS = (BREAKOUT, SPACE_INVADERS)  # replayed here; test_torch_minatar_more.py replays the other three
# every game: (channels, minimal actions)
SHAPES = {
    BREAKOUT: (4, 3),
    SPACE_INVADERS: (6, 4),
    "MinAtar/Asterix-v1": (4, 5),
    "MinAtar/Freeway-v1": (7, 3),
    "MinAtar/Seaquest-v1": (10, 6),
}
# The package's ball_dir 0..3 as (dx, dy), and back.
DIRS = ((-1, -1), (1, -1), (1, 1), (-1, 1))


def assert_same(what: str, ours: torch.Tensor, theirs: torch.Tensor, dim: int = 0) -> None:
    """``ours == theirs`` exactly, batch dimension ``dim``; the message names the envs that
    differ."""
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype, (what, ours.shape, theirs.shape)
    differ = (ours != theirs).movedim(dim, 0)
    envs = differ.reshape(len(differ), -1).any(1).nonzero().flatten().tolist()
    assert not envs, f"{what} differs from the package in envs {envs}"


class ReplayRandom:
    """Stands in for the package's ``np.random.RandomState``, answering from queued draws."""

    def __init__(self):
        self.queue: deque[tuple[str, float]] = deque()

    def push(self, method: str, u: float) -> None:
        self.queue.append((method, u))

    def _next(self, method: str) -> float:
        assert self.queue, f"the package called random.{method}() where the torch env drew nothing"
        want, u = self.queue.popleft()
        assert want == method, f"the package called random.{method}() where the torch env drew for {want}"
        return u

    def rand(self, size: int | None = None) -> float | np.ndarray:
        if size is None:
            return self._next("rand")
        return np.array([self._next("rand") for _ in range(size)])

    def randint(self, low: int, high: int | None = None, size: int | None = None) -> int | np.ndarray:
        low, high = (0, low) if high is None else (low, high)
        if size is None:
            return low + int((high - low) * self._next("randint"))
        return np.array([low + int((high - low) * self._next("randint")) for _ in range(size)])


# ---- the games' states, both ways (counters are [K, B], maps [B, ...]) ---------------------------


def breakout_from_package(g) -> BreakoutState:
    dx, dy = DIRS[g.ball_dir]
    assert not g.brick_map[[0, *range(4, 10)]].any()  # bricks only ever sit on rows 1-3
    bricks = sum(1 << int(i) for i in np.flatnonzero(g.brick_map[1:4]))
    counters = [g.ball_x, g.ball_y, dx, dy, g.pos, g.last_x, g.last_y, int(g.strike), bricks]
    return BreakoutState(torch.tensor(counters).unsqueeze(1))


def breakout_to_package(s: BreakoutState, i: int, g) -> None:
    bx, by, dx, dy, pos, tx, ty, strike, bricks = s.counters[:, i].tolist()
    g.ball_x, g.ball_y, g.ball_dir, g.pos = bx, by, DIRS.index((dx, dy)), pos
    g.last_x, g.last_y, g.strike, g.terminal = tx, ty, bool(strike), False
    g.brick_map = np.zeros((10, 10))
    g.brick_map[1:4] = np.array([(bricks >> k) & 1 for k in range(30)]).reshape(3, 10)


def space_invaders_from_package(g) -> SpaceInvadersState:
    maps = np.stack((g.alien_map, g.f_bullet_map, g.e_bullet_map)).reshape(1, 3, 100) != 0
    counters = [
        g.pos,
        g.alien_dir,
        g.enemy_move_interval,
        g.alien_move_timer,
        g.alien_shot_timer,
        g.shot_timer,
        g.ramp_index,
        np.count_nonzero(g.alien_map),
    ]
    return SpaceInvadersState(torch.from_numpy(maps), torch.tensor(counters).unsqueeze(1))


def space_invaders_to_package(s: SpaceInvadersState, i: int, g) -> None:
    aliens, friendly, enemy = s.maps[i].reshape(3, 10, 10).double().numpy().copy()
    g.alien_map, g.f_bullet_map, g.e_bullet_map = aliens, friendly, enemy
    (
        g.pos,
        g.alien_dir,
        g.enemy_move_interval,
        g.alien_move_timer,
        g.alien_shot_timer,
        g.shot_timer,
        g.ramp_index,
        count,
    ) = s.counters[:, i].tolist()
    assert count == np.count_nonzero(aliens)
    g.terminal = False


def batch_dim(field: str) -> int:
    """The batch dimension of a game state's field: first in ``maps``, last in the others."""
    return 0 if field == "maps" else -1


def random_breakout(n: int, gen: torch.Generator) -> BreakoutState:
    """States off the beaten track: few bricks (refills), any ball direction, strike set."""
    r = lambda hi: torch.randint(hi, (n,), generator=gen)
    x, y, paddle = r(10), r(9), r(10)
    dx, dy = r(2) * 2 - 1, r(2) * 2 - 1
    bits = (torch.rand(n, 30, generator=gen) < 0.06).long() << torch.arange(30)
    ball = torch.where((y >= 1) & (y <= 3), 1 << ((y - 1) * 10 + x).clamp(0, 29), 0)
    bricks = bits.sum(1) & ~ball  # never a brick under the ball
    counters = torch.stack(
        (x, y, dx, dy, paddle, (x - dx).clamp(0, 9), (y - dy).clamp(0, 9), (r(5) == 0).long(), bricks)
    )
    return BreakoutState(counters)


def random_space_invaders(n: int, gen: torch.Generator) -> SpaceInvadersState:
    """Few aliens anywhere (cleared waves, ramping, fast aliens), bullets, any timers."""
    r = lambda hi: torch.randint(hi, (n,), generator=gen)
    rows = torch.arange(100) // 10
    aliens = (torch.rand(n, 100, generator=gen) < 0.03) & (rows < 9)
    aliens[torch.arange(n), r(90)] = True  # the package needs an alien to pick a shooter
    friendly = (torch.rand(n, 100, generator=gen) < 0.05) & (rows < 9)
    enemy = torch.rand(n, 100, generator=gen) < 0.05
    interval = 6 + r(7)
    counters = torch.stack(
        (r(10), r(2) * 2 - 1, interval, torch.minimum(r(13), interval), r(11), r(5), r(7), aliens.sum(1))
    )
    return SpaceInvadersState(torch.stack((aliens, friendly, enemy), 1), counters)


# ---- policies that play for long enough to clear waves -----------------------------------------

COLS = torch.arange(10)


def _column(mask: torch.Tensor) -> torch.Tensor:
    """The column of the one set cell of ``[B, 10]``."""
    return (mask.long() * COLS).sum(1)


def breakout_policy(obs: torch.Tensor) -> torch.Tensor:
    """Moves the paddle to where the falling ball will be on row 8 (reflecting off the walls)."""
    paddle, x, y = _column(obs[:, 0, 9]), _column(obs[:, 1].any(1)), _column(obs[:, 1].any(2))
    dx = (x - _column(obs[:, 2].any(1))).sign()
    dx = torch.where(dx == 0, torch.where(x == 0, 1, -1), dx)
    down = y > _column(obs[:, 2].any(2))
    for k in range(9):
        go = down & (y + k < 8)
        nx = x + dx
        dx = torch.where(go & ((nx < 0) | (nx > 9)), -dx, dx)
        x = torch.where(go, nx.clamp(0, 9), x)
    return torch.where(x < paddle, 1, torch.where(x > paddle, 2, 0))


def space_invaders_policy(obs: torch.Tensor) -> torch.Tensor:
    """Dodges what lands next step, else heads for the nearest aliens and fires."""
    cannon, aliens = _column(obs[:, 0, 9]), obs[:, 1].any(1)
    target = torch.where(aliens, (COLS - cannon[:, None]).abs(), 99).argmin(1)
    greedy = torch.where(target < cannon, 1, torch.where(target > cannon, 2, 3))
    unsafe = obs[:, 5, 8] | obs[:, 1, 8] | obs[:, 1, 9]
    dest = torch.stack((cannon, (cannon - 1).clamp(0, 9), (cannon + 1).clamp(0, 9), cannon), 1)
    score = unsafe.gather(1, dest).long() * 10 + (torch.arange(4) != greedy[:, None]).long()
    return score.argmin(1)


def no_draws(g, executed: int) -> list[tuple[str, int]]:
    return []


@dataclass(frozen=True)
class Game:
    env_id: str
    package: str  # minatar.environments module
    reset_calls: tuple[str, ...]  # the package's draws in one reset, in order (the last R columns)
    from_package: Callable  # the package's game -> the torch state of one env
    to_package: Callable  # (torch state, env i, the package's game) -> None
    random_state: Callable[[int, torch.Generator], tuple]
    policy: Callable[[torch.Tensor], torch.Tensor]
    progress: Callable  # the package's game -> a number that grows at a refill / ramp
    # (the package's game before a step, the executed action) -> [(method, column)]: its draws
    step_calls: Callable[[object, int], list[tuple[str, int]]] = no_draws
    canon: Callable = lambda state: state  # a state in a canonical form (entity slots sorted)


GAMES = {
    BREAKOUT: Game(
        BREAKOUT,
        "breakout",
        ("randint",),
        breakout_from_package,
        breakout_to_package,
        random_breakout,
        breakout_policy,
        lambda g: g.brick_map.sum(),
    ),
    SPACE_INVADERS: Game(
        SPACE_INVADERS,
        "space_invaders",
        (),
        space_invaders_from_package,
        space_invaders_to_package,
        random_space_invaders,
        space_invaders_policy,
        lambda g: g.ramp_index,
    ),
}


class Lockstep:
    """A torch env and ``B`` package envs driven with the same actions and draws, compared on
    every step (see the module docstring); counts what happened for coverage checks."""

    def __init__(self, game: Game, num_envs: int, limit: int, seed: int):
        self.game, self.limit = game, limit
        self.env = make_torch_env(game.env_id, num_envs, seed=seed, max_episode_steps=limit)
        self.pkg = [minatar_gym.BaseEnv(self.game.package, use_minimal_action_set=True) for _ in range(num_envs)]
        self.replay = [ReplayRandom() for _ in range(num_envs)]
        for p, rnd in zip(self.pkg, self.replay):
            p.game.random = p.game.env.random = rnd
        self.elapsed = [0] * num_envs
        self.counts = dict.fromkeys(("steps", "terminated", "truncated", "reward", "sticky", "progress"), 0)
        self.obs = self.env.reset_all()
        u = self.env.last_draws
        for i in range(num_envs):
            self._reset_package(i, u[i])
        self._check_state(self.obs)

    def _reset_package(self, i: int, u: torch.Tensor) -> None:
        for method, value in zip(self.game.reset_calls, u[1 + self.env.step_draws :].tolist(), strict=True):
            self.replay[i].push(method, value)
        self.pkg[i].reset()
        assert not self.replay[i].queue, "the torch env drew for a reset more than the package"
        self.elapsed[i] = 0

    def _package_obs(self) -> torch.Tensor:
        return torch.from_numpy(np.stack([p.game.state() for p in self.pkg])).permute(0, 3, 1, 2)

    def _check_state(self, obs: torch.Tensor) -> None:
        assert_same("observation", obs, self._package_obs())
        ours = self.game.canon(self.env.game_state)
        theirs = self.game.canon(
            type(ours)(*(torch.cat(f, batch_dim(name)) for name, f in zip(ours._fields, zip(*self._package_states()))))
        )
        for name, a, b in zip(ours._fields, ours, theirs):
            assert_same(f"state {name}", a, b, batch_dim(name))
        assert_same("elapsed steps", self.env.elapsed_steps, torch.tensor(self.elapsed))

    def _package_states(self) -> list[tuple]:
        return [self.game.from_package(p.game.env) for p in self.pkg]

    def step(self, action: torch.Tensor) -> None:
        before = [self.game.progress(p.game.env) for p in self.pkg]
        next_obs, reward, terminated, truncated, self.obs = self.env.step_autoreset(action)
        u = self.env.last_draws
        ref_reward, ref_term = [], []
        for i, p in enumerate(self.pkg):
            sticky = u[i, 0].item()
            executed = p.game.last_action if sticky < p.game.sticky_action_prob else p.action_set[int(action[i])]
            self.replay[i].push("rand", sticky)
            for method, column in self.game.step_calls(p.game.env, executed):
                self.replay[i].push(method, u[i, column].item())
            _, r, term, trunc, _ = p.step(int(action[i]))
            assert not self.replay[i].queue and not trunc
            assert p.game.last_action == executed
            ref_reward.append(float(r))
            ref_term.append(bool(term))
            self.elapsed[i] += 1
            self.counts["progress"] += int(self.game.progress(p.game.env) > before[i])
            self.counts["sticky"] += int(executed != p.action_set[int(action[i])])
        assert_same("next observation", next_obs, self._package_obs())
        assert_same("reward", reward[:, 0], torch.tensor(ref_reward))
        assert_same("terminated", terminated[:, 0], torch.tensor(ref_term))
        assert_same("truncated", truncated[:, 0], torch.tensor(self.elapsed) >= self.limit)
        executed = [self.pkg[0].action_set.index(p.game.last_action) for p in self.pkg]
        assert_same("executed action", self.env.last_action, torch.tensor(executed))
        for i in (terminated[:, 0] | truncated[:, 0]).nonzero().flatten().tolist():
            self._reset_package(i, u[i])
        self._check_state(self.obs)
        self.counts["steps"] += len(self.pkg)
        self.counts["terminated"] += int(terminated.sum())
        self.counts["truncated"] += int(truncated.sum())
        self.counts["reward"] += float(reward.sum())

    def jump(self, mask: torch.Tensor, gen: torch.Generator) -> None:
        """Envs in ``mask`` ``[B]`` jump to random states, in both implementations."""
        state = self.game.random_state(len(self.pkg), gen)
        self.env.game_state = self.env.select(mask, state, self.env.game_state)
        for i in mask.nonzero().flatten().tolist():
            self.game.to_package(state, i, self.pkg[i].game.env)
        self._check_state(self.env.observe(self.env.game_state))


def play(game: Game, num_envs: int, steps: int, limit: int, jump_prob: float, seed: int) -> dict:
    """``steps`` lockstep steps of ``num_envs`` envs (see ``Lockstep``); returns its counts."""
    run = Lockstep(game, num_envs, limit, seed)
    gen = torch.Generator().manual_seed(seed)
    # env i plays at random with probability (i / (B - 1)) ** 2: a few long episodes, many short
    eps = torch.linspace(0, 1, num_envs) ** 2
    n = run.env.num_actions
    for _ in range(steps):
        if jump_prob:
            run.jump(torch.rand(num_envs, generator=gen) < jump_prob, gen)
        random = torch.randint(n, (num_envs,), generator=gen)
        greedy = run.game.policy(run.obs)
        run.step(torch.where(torch.rand(num_envs, generator=gen) < eps, random, greedy))
    return run.counts


@pytest.mark.parametrize("env_id", IDS)
def test_step_for_step_against_the_package(env_id: str):
    counts = play(GAMES[env_id], num_envs=16, steps=640, limit=250, jump_prob=0.0, seed=0)
    assert counts["steps"] >= 10_000
    assert counts["terminated"] >= 30 and counts["truncated"] >= 2, counts
    assert counts["sticky"] >= 100 and counts["reward"] >= 300, counts


@pytest.mark.parametrize("env_id", IDS)
def test_step_for_step_against_the_package_from_random_states(env_id: str):
    # Jumps reach what short play rarely does: a cleared wall or wave, the fastest aliens,
    # aliens turning on the bottom row, a ball passing through a brick.
    counts = play(GAMES[env_id], num_envs=16, steps=200, limit=100, jump_prob=0.05, seed=1)
    assert counts["progress"] >= 3 and counts["terminated"] >= 20, counts


# ---- TorchRL, resets, seeding, dtypes, devices -------------------------------------------------


@pytest.mark.parametrize("env_id", SHAPES)
def test_check_env_specs_and_dtypes(env_id: str):
    env = make_torch_env(env_id, 5, seed=0)
    check_env_specs(env, seed=0)
    channels, actions = SHAPES[env_id]
    spec = env.observation_spec["observation"]
    assert spec.shape == (5, channels, 10, 10) and spec.dtype == torch.bool
    assert env.reward_spec.shape == (5, 1) and env.reward_spec.dtype == torch.float32
    assert env.action_spec.shape == (5,) and env.action_spec.dtype == torch.int64
    assert env.action_spec.space.n == actions
    for key in ("done", "terminated", "truncated"):
        assert env.full_done_spec[key].shape == (5, 1) and env.full_done_spec[key].dtype == torch.bool
    data = env.rollout(30, break_when_any_done=False)
    assert data["observation"].dtype == data["next", "observation"].dtype == torch.bool
    obs = env.reset_all()
    out = env.step_autoreset(torch.zeros(5, dtype=torch.long))
    assert obs.dtype == torch.bool and obs.shape == (5, channels, 10, 10)
    assert [t.dtype for t in out] == [torch.bool, torch.float32, torch.bool, torch.bool, torch.bool]
    assert [tuple(t.shape) for t in out[1:4]] == [(5, 1)] * 3
    assert env_id in TORCH_ENV_IDS and env.max_episode_steps == 10_000


@pytest.mark.parametrize("env_id", SHAPES)
def test_step_autoreset_equals_step_and_maybe_reset(env_id: str):
    num_envs = 16
    torchrl_env = make_torch_env(env_id, num_envs, seed=11, max_episode_steps=40)
    lean_env = make_torch_env(env_id, num_envs, seed=11, max_episode_steps=40)
    gen = torch.Generator().manual_seed(0)
    td = torchrl_env.reset()
    assert torch.equal(td["observation"], lean_env.reset_all())
    n_terminated = n_truncated = 0
    for _ in range(100):
        action = torch.randint(lean_env.num_actions, (num_envs,), generator=gen)
        td["action"] = action
        out, td = torchrl_env.step_and_maybe_reset(td)
        next_obs, reward, terminated, truncated, obs = lean_env.step_autoreset(action)
        assert torch.equal(out["next", "observation"], next_obs)
        assert torch.equal(out["next", "reward"], reward)
        assert torch.equal(out["next", "terminated"], terminated)
        assert torch.equal(out["next", "truncated"], truncated)
        assert torch.equal(td["observation"], obs)
        n_terminated += int(terminated.sum())
        n_truncated += int(truncated.sum())
    assert n_truncated > 0 and (n_terminated > 0 or env_id == "MinAtar/Freeway-v1")  # it ends after 2,501 steps


@pytest.mark.parametrize("env_id", SHAPES)
def test_partial_reset_mask_through_reset(env_id: str):
    env = make_torch_env(env_id, 6, seed=0)
    td = env.reset()
    fresh = env.game_state
    gen = torch.Generator().manual_seed(0)
    for _ in range(12):
        td["action"] = torch.randint(env.num_actions, (6,), generator=gen)
        td = env.step(td)["next"].clone()
    state, elapsed, last_action = env.game_state, env.elapsed_steps, env.last_action
    mask = torch.tensor([True, False, False, True, False, True])
    td["_reset"] = mask[:, None]
    out = env.reset(td)
    after = env.game_state
    for name, a, b, f in zip(after._fields, after, state, fresh):
        a, b, f = (t.movedim(batch_dim(name), 0) for t in (a, b, f))
        assert torch.equal(a[~mask], b[~mask])  # the others go on untouched
        if env.num_initial_states == 1:  # deterministic resets
            assert torch.equal(a[mask], f[mask])
    assert not torch.equal(after.counters[:, mask], state.counters[:, mask])
    assert torch.equal(env.elapsed_steps, torch.where(mask, 0, elapsed))
    assert torch.equal(env.last_action, last_action)  # as the package: it survives resets
    assert torch.equal(out["observation"], env.observe(after))
    assert torch.equal(out["observation"][~mask], td["observation"][~mask])


def test_breakout_reset_draw_picks_the_side():
    # int(2 * u): u < 0.5 starts on the left wall heading down-right, else the right wall.
    env = make_torch_env(BREAKOUT, 4, seed=0)
    side = env.reset_index(torch.tensor([[0.0, 0.4999, 0.5, 0.999]]))
    assert side.tolist() == [0, 0, 1, 1]
    s = env.initial_state(side)
    assert s.counters[:4].t().tolist() == [[0, 3, 1, 1], [0, 3, 1, 1], [9, 3, -1, 1], [9, 3, -1, 1]]
    # Over a full reset of many envs both sides appear about equally often.
    env = make_torch_env(BREAKOUT, 4096, seed=0)
    left = (env.game_state.counters[0] == 0).float().mean()
    assert 0.45 < left < 0.55


def test_seeding_is_reproducible_and_sticky_actions_are_drawn():
    def run(env: TorchGridEnv) -> list[torch.Tensor]:
        outs = [env.reset_all()]
        for t in range(80):
            outs += env.step_autoreset(torch.full((32,), t % 3))
        return outs

    first = run(make_torch_env(BREAKOUT, 32, seed=7))
    again = run(make_torch_env(BREAKOUT, 32, seed=7))
    other = run(make_torch_env(BREAKOUT, 32, seed=8))
    reseeded = make_torch_env(BREAKOUT, 32, seed=123)
    reseeded.set_seed(7)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert all(torch.equal(a, b) for a, b in zip(first, run(reseeded)))
    assert not all(torch.equal(a, b) for a, b in zip(first, other))
    # sticky_action_prob 1: the first executed action (0 after seeding) repeats for ever.
    env = make_torch_env(SPACE_INVADERS, 8, seed=0, sticky_action_prob=1.0)
    env.reset_all()
    for _ in range(20):
        env.step_autoreset(torch.full((8,), 3))
    assert (env.last_action == 0).all() and not env.game_state.maps[:, 1].any()  # never fired


def test_time_limit_and_arguments():
    env = make_torch_env(SPACE_INVADERS, 4, seed=0, max_episode_steps=None, sticky_action_prob=0.0)
    env.reset_all()
    n_terminated = 0
    for _ in range(400):  # never moves or fires: the aliens come down and end every episode
        _, _, terminated, truncated, _ = env.step_autoreset(torch.zeros(4, dtype=torch.long))
        assert not truncated.any()
        n_terminated += int(terminated.sum())
    assert n_terminated >= 4
    assert env.max_episode_steps is None and "max_episode_steps=None" in repr(env)
    env = make_torch_env(BREAKOUT, 4, seed=0, max_episode_steps=3)
    env.reset_all()
    flags = [env.step_autoreset(torch.zeros(4, dtype=torch.long))[3].all().item() for _ in range(6)]
    assert flags == [False, False, True] * 2
    for bad in ({"max_episode_steps": 0}, {"sticky_action_prob": 1.5}):
        with pytest.raises(ValueError):
            make_torch_env(BREAKOUT, 4, **bad)
    with pytest.raises(ValueError):
        make_torch_env(BREAKOUT, 0)


@pytest.mark.parametrize("env_id", SHAPES)
def test_dynamics_trace_without_graph_breaks(env_id: str):
    # fullgraph=True fails on any data-dependent Python branch or host read.
    env = make_torch_env(env_id, 64, seed=0)
    gen = torch.Generator().manual_seed(1)
    for _ in range(30):  # a state some way into the episodes
        env.step_autoreset(torch.randint(env.num_actions, (64,), generator=gen))
    state, action = env.game_state, torch.randint(env.num_actions, (64,), generator=gen)
    draws = torch.rand(env.step_draws, 64, generator=gen)
    compiled = torch.compile(env.dynamics, fullgraph=True, backend="eager")
    got, want = compiled(state, action, draws), env.dynamics(state, action, draws)

    def full(state: tuple) -> tuple:  # Seaquest keeps only the enemy slots in use outside compile
        env.game_state = state
        return env.game_state

    for a, b in zip([*full(got[0]), *got[1:]], [*full(want[0]), *want[1:]]):
        assert torch.equal(a, b)


def test_the_envs_do_not_import_minatar():
    import ast
    import inspect

    from distrl.envs.torch_envs import (
        grid,
        minatar_asterix,
        minatar_breakout,
        minatar_freeway,
        minatar_seaquest,
        minatar_space_invaders,
        seaquest_state,
    )

    modules = (grid, minatar_asterix, minatar_breakout, minatar_freeway, minatar_seaquest, minatar_space_invaders)
    for module in (*modules, seaquest_state):
        for node in ast.walk(ast.parse(inspect.getsource(module))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            assert not any(n.split(".")[0] == "minatar" for n in names), module.__name__


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("env_id", SHAPES)
def test_cuda_matches_cpu_without_syncs(env_id: str):
    # No stickiness in the comparison (the devices' random streams differ); it is drawn anyway.
    cpu = make_torch_env(env_id, 256, seed=0, sticky_action_prob=0.0)
    cuda = make_torch_env(env_id, 256, device="cuda", seed=0, sticky_action_prob=0.0)
    check_env_specs(cuda)
    gen = torch.Generator().manual_seed(0)
    actions = [torch.randint(cpu.num_actions, (256,), generator=gen) for _ in range(60)]
    on_device = [a.cuda() for a in actions]
    cuda.reset_all()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # a host read of a device value in a step raises
    try:
        states, outs, draws = [], [], []
        for a in on_device:
            states.append(cuda.game_state)
            outs.append(cuda.step_autoreset(a))
            draws.append(cuda.last_draws[:, 1 : 1 + cuda.step_draws].t())
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for state, a, out, u in zip(states, actions, outs, draws):
        ref_state, reward, terminated = cpu.dynamics(type(state)(*(t.cpu() for t in state)), a, u.cpu())
        assert all(t.device.type == "cuda" for t in out)
        assert torch.equal(out[0].cpu(), cpu.observe(ref_state))
        assert torch.equal(out[1][:, 0].cpu(), reward)
        assert torch.equal(out[2][:, 0].cpu(), terminated)
    assert sum(int(out[2].sum()) for out in outs) > 0 or env_id == "MinAtar/Freeway-v1"  # 2,500-step episodes
    moved = make_torch_env(env_id, 8, seed=0).to("cuda")
    check_env_specs(moved)
    moved.reset_all()
    zeros = torch.zeros(8, dtype=torch.long, device="cuda")
    assert all(t.device.type == "cuda" for t in moved.step_autoreset(zeros))


@pytest.mark.parametrize("env_id", SHAPES)
def test_step_autoreset_runs_in_inference_mode_and_returns_ordinary_tensors(env_id: str):
    """The lean step runs under ``torch.inference_mode``; what it returns is a user's to write into
    and to feed to autograd (an inference tensor refuses both outside inference mode)."""
    env = make_torch_env(env_id, 8, seed=0, max_episode_steps=3)  # the third step resets every env
    env.reset_all()
    for _ in range(3):
        out = env.step_autoreset(torch.zeros(8, dtype=torch.long))
    assert out[3].all() and not any(t.is_inference() for t in out)
    for t in out:
        t.logical_not_() if t.dtype == torch.bool else t.mul_(2)
    weight = torch.ones((), requires_grad=True)
    (out[1] * weight).sum().backward()  # saves the reward for the gradient of weight
    assert weight.grad is not None
