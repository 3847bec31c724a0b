"""Torch Asterix, Freeway and Seaquest against the ``minatar`` package, step for step.

The lockstep replay of ``test_torch_minatar.py`` (its docstring maps each game's random draws to
columns of the torch env's ``last_draws``); here each game's state converters, states off the
beaten track that both implementations jump to, and a policy that plays for long enough.
"""

from __future__ import annotations

import pytest
import torch
from test_torch_minatar import COLS, Game, _column, play

from distrl.envs.torch_envs.minatar_asterix import AsterixState
from distrl.envs.torch_envs.minatar_freeway import FreewayState
from distrl.envs.torch_envs.seaquest_state import BA, G, SeaquestState

pytest.importorskip("minatar.gym")

ASTERIX, FREEWAY, SEAQUEST = "MinAtar/Asterix-v1", "MinAtar/Freeway-v1", "MinAtar/Seaquest-v1"


def rints(n: int, gen: torch.Generator):
    """``r(hi)``: int64 uniform in ``[0, hi)``, ``[n]`` for an int ``hi``, else ``hi``'s shape."""
    return lambda hi: (torch.rand(torch.as_tensor(hi).shape or (n,), generator=gen) * hi).long()


# ---- Asterix -----------------------------------------------------------------------------------


def asterix_from_package(g) -> AsterixState:
    counters = [g.player_x, g.player_y, g.spawn_speed, g.spawn_timer, g.move_speed, g.move_timer]
    entities = torch.zeros(4, 8, 1, dtype=torch.int8)
    for i, e in enumerate(g.entities):
        if e is not None:
            assert e[1] == i + 1
            entities[:, i, 0] = torch.tensor([1, e[0], int(e[2]), int(e[3])], dtype=torch.int8)
    return AsterixState(torch.tensor([*counters, g.ramp_timer, g.ramp_index]).unsqueeze(1), entities)


def asterix_to_package(s: AsterixState, i: int, g) -> None:
    (g.player_x, g.player_y, g.spawn_speed, g.spawn_timer, g.move_speed, g.move_timer, g.ramp_timer, g.ramp_index) = (
        s.counters[:, i].tolist()
    )
    g.entities = [
        [x, row + 1, bool(right), bool(gold)] if alive else None
        for row, (alive, x, right, gold) in enumerate(s.entities[:, :, i].t().tolist())
    ]
    g.terminal = False


def random_asterix(n: int, gen: torch.Generator) -> AsterixState:
    """Any speeds and timers (ramps due, the fastest spawns), half the rows taken."""
    r = rints(n, gen)
    spawn_speed, move_speed = 1 + r(10), 1 + r(5)
    counters = torch.stack((r(10), 1 + r(8), spawn_speed, r(spawn_speed), move_speed, r(move_speed), r(102) - 1, r(12)))
    alive = (torch.rand(8, n, generator=gen) < 0.5).long()
    entities = torch.stack((alive, r(torch.full((8, n), 10)), r(torch.full((8, n), 2)), r(torch.full((8, n), 3)) == 0))
    return AsterixState(counters, (entities.long() * alive).to(torch.int8))


def asterix_policy(obs: torch.Tensor) -> torch.Tensor:
    """Moves away from enemies next to the player in its row, else towards the nearest gold."""
    x, y = _column(obs[:, 0].any(1)), _column(obs[:, 0].any(2))
    n = len(x)
    dest_x = torch.stack((x, (x - 1).clamp(0, 9), x, (x + 1).clamp(0, 9), x), 1)
    dest_y = torch.stack((y, y, (y - 1).clamp(1, 8), y, (y + 1).clamp(1, 8)), 1)
    rows = obs[torch.arange(n)[:, None], 1, dest_y]  # [B, 5, 10]: enemies on the destination's row
    near = (COLS - dest_x[..., None]).abs() <= 1
    danger = (rows & near).any(2)
    gold = obs[:, 3].any(2).float()  # [B, 10]: rows with gold
    pull = gold[torch.arange(n)[:, None], dest_y]
    return (danger.float() * 10 - pull).argmin(1)


def asterix_calls(g, executed: int) -> list[tuple[str, int]]:
    if g.spawn_timer != 0:
        return []
    return [("rand", 1), ("rand", 2)] + ([("randint", 3)] if None in g.entities else [])


# ---- Freeway -----------------------------------------------------------------------------------


def freeway_from_package(g) -> FreewayState:
    assert [car[1] for car in g.cars] == list(range(1, 9))
    cars = torch.tensor([[car[0], car[2], car[3]] for car in g.cars], dtype=torch.int8).t().unsqueeze(2)
    return FreewayState(torch.tensor([g.pos, g.move_timer, g.terminate_timer]).unsqueeze(1), cars)


def freeway_to_package(s: FreewayState, i: int, g) -> None:
    g.pos, g.move_timer, g.terminate_timer = s.counters[:, i].tolist()
    g.cars = [[x, row + 1, timer, speed] for row, (x, timer, speed) in enumerate(s.cars[:, :, i].t().tolist())]
    g.terminal = False


def random_freeway(n: int, gen: torch.Generator) -> FreewayState:
    """The chicken anywhere below the top, any car speeds and timers, episodes near their end."""
    r = rints(n, gen)
    speed = (1 + r(torch.full((8, n), 5))) * (2 * r(torch.full((8, n), 2)) - 1)
    cars = torch.stack((r(torch.full((8, n), 10)), r(speed.abs() + 1), speed)).to(torch.int8)
    return FreewayState(torch.stack((1 + r(9), r(4), r(40))), cars)


def freeway_policy(obs: torch.Tensor) -> torch.Tensor:
    """Up, unless a car is next to the chicken's column on the row above (then wait)."""
    row = _column(obs[:, 0].any(2))
    above = obs[torch.arange(len(row)), 1, (row - 1).clamp(0, 9)]  # [B, 10]
    return torch.where(above[:, 3:6].any(1), 0, 1)


def freeway_calls(g, executed: int) -> list[tuple[str, int]]:
    if executed == 2 and g.move_timer == 0 and g.pos == 1:  # "u" reaches the top: new speeds
        return [("randint", c) for c in range(1, 9)] + [("rand", c) for c in range(9, 17)]
    return []


# ---- Seaquest ----------------------------------------------------------------------------------

SEAQUEST_COUNTERS = ("sub_x", "sub_y", "sub_or", "oxygen", "diver_count", "e_spawn_speed", "e_spawn_timer")
SEAQUEST_COUNTERS += ("d_spawn_timer", "move_speed", "ramp_index", "shot_timer", "surface")


def seaquest_from_package(g) -> SeaquestState:
    """Slots in the package's list order: fish, then subs (ages by list order), bullets, divers."""
    counters = torch.tensor([int(getattr(g, name)) for name in SEAQUEST_COUNTERS], dtype=torch.int16).unsqueeze(1)
    enemies = [[1, f[0], f[1], 2 * f[2] - 1, 0, f[3], 0, len(g.e_fish) - k] for k, f in enumerate(g.e_fish)]
    enemies += [[1, s[0], s[1], 2 * s[2] - 1, 1, s[3], s[4], len(g.e_subs) - k] for k, s in enumerate(g.e_subs)]
    enemies = torch.tensor([*enemies, *[[0] * 8] * (32 - len(enemies))], dtype=torch.int8)
    e_bullets = [[1, b[0], b[1], 2 * b[2] - 1] for b in g.e_bullets]
    e_bullets = torch.tensor([*e_bullets, *[[0] * 4] * (32 - len(e_bullets))], dtype=torch.int8)
    bullets = [[1, b[0], b[1], 2 * b[2] - 1] for b in g.f_bullets] + [[0] * 4] * (2 - len(g.f_bullets))
    divers = [[1, d[0], d[1], 2 * d[2] - 1, d[3]] for d in g.divers] + [[0] * 5] * (2 - len(g.divers))
    slots = (torch.cat((enemies, e_bullets), 1), torch.tensor(bullets, dtype=torch.int8))
    slots += (torch.tensor(divers, dtype=torch.int8),)
    return SeaquestState(counters, *(t.t().unsqueeze(2) for t in slots))


def _sorted(fields: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """``fields`` ``[F, S, B]`` with the slots of each env sorted by ``key`` ``[S, B]``."""
    order = key.argsort(dim=0, stable=True)
    return fields.gather(1, order.unsqueeze(0).expand_as(fields))


def seaquest_canon(s: SeaquestState) -> SeaquestState:
    """Enemies in list order (alive fish, alive subs, each oldest first; ages dropped), enemy and
    friendly bullets sorted by cell (their order is not observable)."""
    e = torch.nn.functional.pad(s.enemies.long(), (0, 0, 0, 32 - s.enemies.shape[1]))  # all 32 slots
    enemies = _sorted(e[:8], (1 - e[0]) * 1000 + e[4] * 100 + 99 - e[G])
    enemies[G] = 0
    code = lambda f: (1 - f[0]) * 1000 + f[2] * 30 + f[1] * 3 + f[3] + 1  # noqa: E731
    e_bullets, bullets = _sorted(e[BA:], code(e[BA:])), _sorted(s.bullets.long(), code(s.bullets.long()))
    return SeaquestState(s.counters, torch.cat((enemies, e_bullets)), bullets, s.divers)


def seaquest_to_package(s: SeaquestState, i: int, g) -> None:
    for name, value in zip(SEAQUEST_COUNTERS, s.counters[:, i].tolist()):
        setattr(g, name, bool(value) if name in ("sub_or", "surface") else value)
    e = s.enemies[:, :, i].t().tolist()  # [32 slots][12 fields]
    alive = sorted((f for f in e if f[0]), key=lambda f: -f[G])  # the oldest first
    g.e_fish = [[x, y, d > 0, t] for _, x, y, d, sub, t, *_ in alive if not sub]
    g.e_subs = [[x, y, d > 0, t, h] for _, x, y, d, sub, t, h, *_ in alive if sub]
    g.e_bullets = [[x, y, d > 0] for *_, a, x, y, d in e if a]
    g.f_bullets = [[x, y, d > 0] for a, x, y, d in s.bullets[:, :, i].t().tolist() if a]
    g.divers = [[x, y, d > 0, t] for a, x, y, d, t in s.divers[:, :, i].t().tolist() if a]
    g.terminal = False


def random_seaquest(n: int, gen: torch.Generator) -> SeaquestState:
    """Little oxygen, six divers on board or -1 (the package's quirk), fast spawns and enemies,
    enemies sharing cells, enemy bullets, a diver about to leave. Within the slots' bounds: no
    friendly bullet (a third could fly), a diver near the wall, bullets only in free slots."""
    r = rints(n, gen)
    full = lambda hi: r(torch.full((32, n), hi))  # noqa: E731
    sx, sy = r(10), r(9)
    sub_or = torch.where(sx == 0, 0, torch.where(sx == 9, 1, r(2)))  # the back stays on the grid
    oxygen = torch.where(r(3) == 0, r(30), r(201))
    e_speed, speed = 2 + r(19), 2 + r(4)
    counters = [
        sx,
        sy,
        sub_or,
        oxygen,
        r(8) - 1,
        e_speed,
        r(e_speed),
        r(30),
        speed,
        r(20),
        r(5),
        (sy == 0) & (r(2) == 1),
    ]
    alive = (torch.rand(32, n, generator=gen) < 0.2) & (torch.arange(32) < 8).unsqueeze(1)
    x, y, right = full(10), 1 + full(8), 2 * full(2) - 1
    twin = r(torch.full((8, n), 3)) == 0  # slot k + 8 copies slot k's cell, heading and timer
    is_sub, timer = full(2), r(speed.expand(32, n) + 1)
    for f in (x, y, right, timer):
        f[8:16] = torch.where(twin, f[:8], f[8:16])
    alive[8:16] = twin & alive[:8]
    age = 1 + torch.rand(32, n, generator=gen).argsort(0)  # distinct, the newest 1
    shot = is_sub * full(11)
    bullet = ~alive & (torch.rand(32, n, generator=gen) < 0.1)
    enemies = torch.stack(
        (alive, x, y, right, is_sub, timer, shot, age, bullet, full(10), 1 + full(8), 2 * full(2) - 1)
    )
    enemies = torch.cat((enemies[:8] * alive, enemies[8:] * bullet)).to(torch.int8)
    d_right = r(2)
    divers = torch.stack((r(2), torch.where(d_right == 1, 6 + r(4), r(4)), 1 + r(8), 2 * d_right - 1, r(6)))
    divers = torch.stack((divers * divers[0], torch.zeros_like(divers)), 1).to(torch.int8)
    bullets = torch.zeros(4, 2, n, dtype=torch.int8)
    return SeaquestState(torch.stack([c.to(torch.int16) for c in counters]), enemies, bullets, divers)


def seaquest_policy(obs: torch.Tensor) -> torch.Tensor:
    """Surfaces when oxygen runs low with divers aboard; else fires at an enemy on its row,
    dodges one in front, and heads for a diver's row."""
    n = len(obs)
    y, x = _column(obs[:, 0].any(2)), _column(obs[:, 0].any(1))
    oxygen, divers = obs[:, 7, 9].sum(1), obs[:, 8, 9].sum(1)
    enemies = (obs[:, 5] | obs[:, 6] | obs[:, 4])[torch.arange(n), y]  # [B, 10] on the sub's row
    diver_row = torch.where(obs[:, 9].any(2), torch.arange(10), 99).amin(1)
    action = torch.where(diver_row < y, 2, torch.where(diver_row < 10, 4, 0))
    action = torch.where(enemies.any(1), 5, action)
    near = enemies[torch.arange(n), (x - 1).clamp(0, 9)] | enemies[torch.arange(n), (x + 1).clamp(0, 9)]
    action = torch.where(near, torch.where(y < 8, 4, 2), action)
    return torch.where((oxygen < 4) & (divers > 0), 2, action)


def seaquest_calls(g, executed: int) -> list[tuple[str, int]]:
    enemy = [("rand", 1), ("rand", 2), ("randint", 3)] if g.e_spawn_timer == 0 else []
    return enemy + ([("rand", 4), ("randint", 5)] if g.d_spawn_timer == 0 else [])


GAME = {
    ASTERIX: Game(
        ASTERIX,
        "asterix",
        (),
        asterix_from_package,
        asterix_to_package,
        random_asterix,
        asterix_policy,
        lambda g: g.ramp_index,
        asterix_calls,
    ),
    FREEWAY: Game(
        FREEWAY,
        "freeway",
        ("randint",) * 8 + ("rand",) * 8,
        freeway_from_package,
        freeway_to_package,
        random_freeway,
        freeway_policy,
        lambda g: 0,
        freeway_calls,
    ),
    SEAQUEST: Game(
        SEAQUEST,
        "seaquest",
        (),
        seaquest_from_package,
        seaquest_to_package,
        random_seaquest,
        seaquest_policy,
        lambda g: g.ramp_index,
        seaquest_calls,
        seaquest_canon,
    ),
}


# ---- the lockstep runs -------------------------------------------------------------------------

# (envs, steps, time limit) of the long run, and what it must have seen
LONG = {
    ASTERIX: ((16, 640, 500), {"terminated": 30, "reward": 50, "progress": 20}),
    FREEWAY: ((16, 640, 500), {"truncated": 16, "reward": 50}),
    SEAQUEST: ((16, 400, 500), {"terminated": 50, "reward": 20, "progress": 3}),
}


@pytest.mark.parametrize("env_id", GAME)
def test_step_for_step_against_the_package(env_id: str):
    (envs, steps, limit), least = LONG[env_id]
    counts = play(GAME[env_id], envs, steps, limit, jump_prob=0.0, seed=0)
    assert counts["sticky"] >= 100 and all(counts[k] >= v for k, v in least.items()), counts


@pytest.mark.parametrize("env_id", (ASTERIX, FREEWAY))
def test_step_for_step_against_the_package_from_random_states(env_id: str):
    # Jumps reach what short play rarely does: ramps due, the fastest spawns, episodes ending.
    counts = play(GAME[env_id], num_envs=16, steps=200, limit=100, jump_prob=0.05, seed=1)
    assert counts["terminated"] >= 20 and (counts["progress"] >= 3 or env_id == FREEWAY), counts


def test_seaquest_step_for_step_from_random_states_with_the_package_quirks(monkeypatch):
    """As the other games' run from random states, which here meets the package's corner cases:
    six divers surfaced (the count left at -1) and a surfacing on a negative count, oxygen running
    out, subs firing, enemies sharing a cell, ramps."""
    from minatar.environments import seaquest

    seen = dict.fromkeys(("six", "negative", "oxygen", "fire", "shared"), 0)
    surface, act = seaquest.Env._surface, seaquest.Env.act

    def counting_surface(g):
        seen["six"] += g.diver_count == 6
        seen["negative"] += g.diver_count < 0
        return surface(g)

    def counting_act(g, a):
        bullets, oxygen = len(g.e_bullets), g.oxygen
        cells = [tuple(e[:2]) for e in g.e_fish + g.e_subs]
        seen["shared"] += len(cells) > len(set(cells))
        r, terminal = act(g, a)
        seen["fire"] += len(g.e_bullets) > bullets
        seen["oxygen"] += terminal and oxygen <= 0
        return r, terminal

    monkeypatch.setattr(seaquest.Env, "_surface", counting_surface)
    monkeypatch.setattr(seaquest.Env, "act", counting_act)
    counts = play(GAME[SEAQUEST], num_envs=16, steps=200, limit=100, jump_prob=0.05, seed=1)
    assert counts["terminated"] >= 20 and counts["progress"] >= 3, counts
    assert seen["six"] and seen["negative"] and seen["oxygen"] and seen["fire"] >= 20 and seen["shared"] >= 20, seen


def test_seaquest_over_the_slots_in_use_equals_over_all_32():
    """On CPU Seaquest steps and observes only the enemy slots in use; on CUDA (and under
    torch.compile) all 32: both give the same games."""
    from distrl.envs.torch_envs.minatar_seaquest import TorchMinAtarSeaquest

    class AllSlots(TorchMinAtarSeaquest):
        def _in_use(self, enemies: torch.Tensor) -> int:
            return 32

    lean, full = TorchMinAtarSeaquest(32, seed=3), AllSlots(32, seed=3)
    gen = torch.Generator().manual_seed(0)
    assert torch.equal(lean.reset_all(), full.reset_all())
    for _ in range(300):
        action = torch.randint(6, (32,), generator=gen)
        assert all(torch.equal(a, b) for a, b in zip(lean.step_autoreset(action), full.step_autoreset(action)))
        assert all(torch.equal(a, b) for a, b in zip(lean.game_state, full.game_state))
    assert full._sim.state.enemies.shape[1] == 32 > lean._sim.state.enemies.shape[1]
