"""The state of the torch-native MinAtar Seaquest, its observation, and two helpers of its step
(``minatar_seaquest.py`` steps it): constant columns and the first free of two slots.

The package keeps five Python lists (friendly bullets, enemy bullets, fish, subs, divers) whose
lengths change every step; here every list is a fixed number of slots, int8 fields ``[F, S, B]``
(field, slot, env), so that a step is the same few dozen ops on every env:

* ``enemies`` ``[12, 32, B]``: the fish and subs, 32 slots (fields ``A`` .. ``G``), and the enemy
  bullets (fields ``BA`` .. ``BD``), one per slot. Enemies spawn at most once a step and live at
  most ``10 * move speed + 9`` steps: at the fastest (a spawn every step, move speed 2) 29 are
  alive at once, and slower spawns, which come with slower enemies, leave fewer; 32 slots are
  never all taken (a spawn into a full table would be lost).
  A sub fires every 11 steps and its bullet lives at most 10, and a new enemy in a slot fires 10
  steps after spawning at the earliest, so one bullet per slot is enough; it lives on after its
  sub. The package's list order matters where enemies share a cell (the first fish on a bullet's
  cell is shot, the newest enemy moving onto a bullet takes it): ``G`` is an enemy's age in
  spawns (1: the newest; capped at 62, far above what a game reaches).
* ``bullets`` ``[4, 2, B]``: the player's bullets, two slots (a shot every 5 steps, each lives at
  most 10; two never share a cell).
* ``divers`` ``[5, 2, B]``: two slots (a spawn every 30 steps, each lives at most 60), slot 0
  the older (the package picks up the newest first).

A dead slot's fields are all 0 (a spawn adds its values); ``counters`` ``[12, B]`` int64 hold
the rest.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from distrl.envs.torch_envs.cells import draw_cells
from distrl.envs.torch_envs.grid import GRID

__all__ = [
    "ENEMY_SLOTS",
    "COUNTERS",
    "SeaquestState",
    "initial_state",
    "observe",
    "observe_constants",
    "ObserveConstants",
    "select",
    "Columns",
    "columns",
    "first_free",
    "oxygen_cells",
]

LAST = GRID - 1
ENEMY_SLOTS = 32
MAX_OXYGEN = 200
INIT_SPAWN_SPEED = 20
DIVER_SPAWN_SPEED = 30
INIT_MOVE_INTERVAL = 5
DIVER_MOVE_INTERVAL = 5  # a diver moves every 6 steps
CHANNEL_NAMES = (
    "sub_front",
    "sub_back",
    "friendly_bullet",
    "trail",
    "enemy_bullet",
    "enemy_fish",
    "enemy_sub",
    "oxygen_guage",
    "diver_guage",
    "diver",
)
CHANNELS = len(CHANNEL_NAMES)
DRAWN = 2 + 2 + 3 * 32 + 2 + 2  # cells observe draws (or sends to the sub's front)
#: The counters, in order: the sub's x, y and heading (1: right), oxygen, rescued divers, the
#: enemy spawn speed and timer, the diver spawn timer, the enemies' move speed, the ramp index,
#: the shot timer, and whether the sub is at the surface (the package's ``surface``).
COUNTERS = (
    "sub_x",
    "sub_y",
    "sub_right",
    "oxygen",
    "diver_count",
    "e_spawn_speed",
    "e_spawn_timer",
    "d_spawn_timer",
    "move_speed",
    "ramp_index",
    "shot_timer",
    "surface",
)
#: enemy fields: alive, x, y, heading (+1 right, -1 left), is a sub, move timer, shot timer, age
#: (in spawns); its bullet: alive, x, y, heading
A, X, Y, D, S, T, H, G, BA, BX, BY, BD = range(12)


class SeaquestState(NamedTuple):
    """``B`` Seaquest games (see the module docstring)."""

    counters: Tensor  # [12, B] int16, COUNTERS
    enemies: Tensor  # [12, 32, B] int8: A, X, Y, D, S, T, H, G, BA, BX, BY, BD
    bullets: Tensor  # [4, 2, B] int8: alive, x, y, heading (the sub's)
    divers: Tensor  # [5, 2, B] int8: alive, x, y, heading, move timer; slot 0 the older


def initial_state(n: int, device: torch.device) -> SeaquestState:
    """The one initial state, ``n`` envs, as expanded views (steps never write into a state)."""
    start = [5, 0, 0, MAX_OXYGEN, 0, INIT_SPAWN_SPEED, INIT_SPAWN_SPEED, DIVER_SPAWN_SPEED]
    counters = torch.tensor([*start, INIT_MOVE_INTERVAL, 0, 0, 1], dtype=torch.int16, device=device).unsqueeze(1)
    zeros = torch.zeros((12, ENEMY_SLOTS, 1), dtype=torch.int8, device=device)
    return SeaquestState(
        counters.expand(-1, n),
        zeros.expand(-1, -1, n),
        zeros[:4, :2].expand(-1, -1, n),
        zeros[:5, :2].expand(-1, -1, n),
    )


def select(mask: Tensor, a: SeaquestState, b: SeaquestState) -> SeaquestState:
    """State ``a`` where ``mask`` ``[B]`` is set, else ``b``; bitwise on the int8 slots
    (``torch.where`` is slow on CPU): ``b ^ ((a ^ b) & all-ones where mask)``."""
    ones = -mask.to(torch.int8)
    slots = (x ^ ((y ^ x) & ones) for x, y in zip(b[1:], a[1:]))
    return SeaquestState(torch.where(mask, a.counters, b.counters), *slots)


class ObserveConstants(NamedTuple):
    """``observe``'s constants and buffer for ``N`` envs on one device (``observe_constants``)."""

    base: Tensor  # [N] int32: each env's first flat index (the cells are added up in int32, then cast
    # once to the int64 scatter_ takes: at 4096 envs an int64 add over the cells took 66 us, the cast 13)
    index: Tensor  # [DRAWN, N] int64: the cells' flat indices, rewritten by every call (a 3 MB
    # temporary allocated anew each step would be page-faulted in anew, at 4096 envs)
    backgrounds: Tensor  # [11 * 8, C * 100] bool: an observation with only row 9 of channels 7
    # and 8 drawn, by oxygen cells (0..10) and divers (-1..6)
    gauges: Tensor  # [201] int32: backgrounds' first row for each oxygen (0..200), 8 x its cells
    channels: list[Tensor]  # [K]: [2K + 4, 1] int16, 100 x the channel of observe's objects at K slots


def oxygen_cells(device: torch.device) -> Tensor:
    """``[201]`` int64: ``oxygen * 10 // 200`` for each oxygen 0..200, the package's gauge cells
    (and the reward for surfacing with six divers)."""
    return torch.arange(MAX_OXYGEN + 1, device=device) * 10 // MAX_OXYGEN


def observe_constants(n: int, device: torch.device) -> ObserveConstants:
    """``observe``'s constants for ``n`` envs."""
    size = CHANNELS * GRID * GRID
    if n * size > torch.iinfo(torch.int32).max:
        raise ValueError(f"Seaquest observes at most {torch.iinfo(torch.int32).max // size:,} envs at once, got {n:,}")
    base = torch.arange(0, n * size, size, dtype=torch.int32, device=device)
    cols = torch.arange(GRID, device=device)
    oxygen = cols < torch.arange(11, device=device).unsqueeze(1)  # [11, 10]: 0..10 cells
    divers = (cols >= LAST - torch.arange(-1, 7, device=device).unsqueeze(1)) & (cols < LAST)  # -1..6 divers
    backgrounds = torch.zeros((11, 8, CHANNELS, GRID, GRID), dtype=torch.bool, device=device)
    backgrounds[:, :, 7, LAST] = oxygen.unsqueeze(1)
    backgrounds[:, :, 8, LAST] = divers
    channels = [
        torch.tensor([500] * k + [900] * 2 + [400] * k + [200] * 2, dtype=torch.int16, device=device).unsqueeze(1)
        for k in range(ENEMY_SLOTS + 1)
    ]
    gauges = (oxygen_cells(device) * 8).int()
    index = torch.empty((DRAWN, n), dtype=torch.int64, device=device)
    return ObserveConstants(base, index, backgrounds.view(-1, size), gauges, channels)


def observe(state: SeaquestState, const: ObserveConstants, out: Tensor | None = None) -> Tensor:
    """``[N, 10, 10, 10]`` bool, the package's ``state()`` channels first: sub front and back,
    friendly bullets, trails (of enemies and divers: the cell behind, none at a wall), enemy
    bullets, fish, subs, the oxygen gauge (``oxygen * 10 // 200`` cells of row 9), the diver
    gauge (the last ``divers`` cells of row 9 before column 9) and divers.

    The gauges are a row of a table of blank observations (one gather, faster than zeroing
    the buffer and writing the two gauge rows, strided), then one ``draw_cells`` of the rest:
    the enemies, divers and both kinds of bullets share their fields' layout (alive, x, y,
    heading), so they are drawn as one table ``[4, 2K + 4, N]``; a cell not to be drawn (a dead
    slot, a trail beyond a wall) is sent to the sub's front cell, which is set anyway. ``const``
    is ``observe_constants(N, device)``.
    """
    counters, e, bullets, divers = state
    n, dev, i16 = counters.shape[1], counters.device, torch.int16
    if out is None:
        out = torch.empty((n, CHANNELS * GRID * GRID), dtype=torch.bool, device=dev)
    gauge = const.gauges.index_select(0, counters[3].clamp(0, MAX_OXYGEN).int()) + (counters[4].clamp(min=-1) + 1)
    torch.index_select(const.backgrounds, 0, gauge, out=out)
    sx, sy, right = counters[:3].to(i16)
    front = sy * GRID + sx  # [N], the sub's front cell in its env's observation
    at_front = const.base + front  # [N] int32, the same in the flat buffer
    k = e.shape[1]  # enemy slots
    # Enemies, divers (both with trails), enemy and friendly bullets: [4, 2K + 4, N] int8.
    alive, x, y, heading = torch.cat((e[:4], divers[:4], e[BA:], bullets), 1).unbind(0)
    at = y * GRID + x  # int8
    drawn = at.to(i16) + const.channels[k]  # [2K + 4, N]
    drawn[:k] += e[S].to(i16) * GRID * GRID  # a sub's channel is the fish's + 1
    trail, behind = x[: k + 2] - heading[: k + 2], at[: k + 2] - heading[: k + 2]
    tail = alive[: k + 2] * (trail == trail.clamp(0, LAST)).view(torch.int8)
    cells = torch.cat(  # flat indices, int32
        (
            at_front.unsqueeze(0),
            (at_front + (GRID * GRID + 1) - 2 * right).unsqueeze(0),  # the back
            at_front + alive * (drawn - front),
            at_front + tail * (behind.to(i16) + 3 * GRID * GRID - front),
        )
    )
    m = cells.shape[0]  # fewer than DRAWN with fewer enemy slots
    draw_cells(out.view(-1), const.index[:m].copy_(cells))
    return out.view(n, CHANNELS, GRID, GRID)


class Columns(NamedTuple):
    """Constants for ``B`` envs, materialised (an op broadcasting a ``[K, 1]`` column or a
    scalar is slower on CPU than one over two tensors of one shape)."""

    rank: Tensor  # [32, B] int8, 32 - slot: the first of a set of free slots has the largest
    ones: Tensor  # [B] int8
    fives: Tensor  # [B] int8, a new diver's move timer


def columns(n: int, device: torch.device) -> Columns:
    """``Columns`` for ``n`` envs."""
    rank = torch.arange(ENEMY_SLOTS, 0, -1, dtype=torch.int8, device=device)
    ones = torch.ones(n, dtype=torch.int8, device=device)
    return Columns(rank.unsqueeze(1).expand(-1, n).contiguous(), ones, DIVER_MOVE_INTERVAL * ones)


def first_free(put: Tensor, taken: Tensor) -> Tensor:
    """``[2, B]`` int8 0/1: where ``put`` ``[B]`` bool is set, the first of two slots not
    ``taken`` ``[2, B]`` int8 0/1 (none when both are)."""
    put = put.view(torch.int8)
    return torch.stack((put > taken[0], (put & taken[0]) > taken[1])).view(torch.int8)
