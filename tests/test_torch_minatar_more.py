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

pytest.importorskip("minatar.gym")

ASTERIX = "MinAtar/Asterix-v1"


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
    )
}


# ---- the lockstep runs -------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", GAME)
def test_step_for_step_against_the_package(env_id: str):
    counts = play(GAME[env_id], num_envs=16, steps=640, limit=500, jump_prob=0.0, seed=0)
    assert counts["terminated"] >= 20 and counts["sticky"] >= 100 and counts["reward"] >= 50, counts


@pytest.mark.parametrize("env_id", GAME)
def test_step_for_step_against_the_package_from_random_states(env_id: str):
    counts = play(GAME[env_id], num_envs=16, steps=200, limit=100, jump_prob=0.05, seed=1)
    assert counts["progress"] >= 3 and counts["terminated"] >= 20, counts
