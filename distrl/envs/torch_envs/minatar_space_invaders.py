"""MinAtar Space Invaders as batched tensors, step for step ``minatar`` 1.0.15's
``MinAtar/SpaceInvaders-v1``.

Source of truth: ``minatar/environments/space_invaders.py`` and ``minatar/environment.py``
(sticky actions, probability 0.1; difficulty ramping on by default). The cannon moves along the
bottom row and fires bullets upward (one every 5 steps at most); a 4x6 block of aliens moves
sideways, down a row and back at the walls, every ``move interval`` steps (12, fewer when fewer
than 12 aliens are left); the alien nearest the cannon fires every 10 steps. +1 per alien shot;
terminated when an alien or an enemy bullet reaches the cannon, or when the aliens turn on the
bottom row. A cleared wave is replaced by a fresh one and, with ramping, the move interval of the
episode drops by one (down to 6). The game itself draws no random numbers: only the sticky
actions are random.

State (``SpaceInvadersState``): bool maps ``[B, 3, 100]`` (aliens, friendly bullets, enemy
bullets; cell ``row * 10 + column``) and int64 counters ``[8, B]`` (cannon x, alien direction
-1/+1, move interval, alien move timer, alien shot timer, cannon cool-down, ramp index, number of
aliens). The maps are copied into observations as they are; every per-env choice on them is an
index operation (a row of a table of candidates, a cell at a computed flat index) or bitwise
arithmetic, not a ``torch.where`` (slow on CPU for bool maps); reductions over cells are OR
trees of slices, but for the count of kills.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from distrl.envs.torch_envs.cells import clear, draw_cells
from distrl.envs.torch_envs.grid import GRID, TorchGridEnv

__all__ = ["SpaceInvadersState", "TorchMinAtarSpaceInvaders"]

LAST = GRID - 1  # the bottom row and the rightmost column
SHOT_COOL_DOWN = 5
ENEMY_MOVE_INTERVAL = 12
ENEMY_SHOT_INTERVAL = 10
MIN_MOVE_INTERVAL = 6  # ramping stops here (``enemy_move_interval > 6``)


WAVE_SIZE = 24  # alien_map[0:4, 2:8]
CELLS = GRID * GRID


class SpaceInvadersState(NamedTuple):
    """``B`` Space Invaders games (see the module docstring)."""

    maps: Tensor  # [B, 3, 100] bool: aliens, friendly bullets, enemy bullets
    # [8, B] int64: cannon, alien_dir, move_interval, move_timer, shot_timer, cool_down, ramp,
    # number of aliens (kept so that no step counts the aliens' map: set it with the map)
    counters: Tensor


def _any_of_ten(x: Tensor, dim: int) -> Tensor:
    """``x.any(dim)`` for a dimension of size 10, as an OR tree of slices (bool reductions
    along a short dimension are slow on CPU)."""
    y = x.narrow(dim, 0, 5) | x.narrow(dim, 5, 5)
    z = y.narrow(dim, 0, 2) | y.narrow(dim, 2, 2)
    return (z.select(dim, 0) | z.select(dim, 1)) | y.select(dim, 4)


class TorchMinAtarSpaceInvaders(TorchGridEnv):
    """``B`` MinAtar Space Invaders games on one device; ``MinAtar/SpaceInvaders-v1`` semantics.

    Observation ``[B, 6, 10, 10]`` bool, channels (cannon, alien, alien_left, alien_right,
    friendly_bullet, enemy_bullet) as the package's ``state()`` with channels first; the aliens
    appear in ``alien_left`` or ``alien_right`` by their direction. Action ``[B]`` int64 in the
    minimal set {0: noop, 1: left, 2: right, 3: fire}; reward 1 per alien shot.

    Args:
        ramping: the package's ``difficulty_ramping`` (on by default).
        other arguments: see ``TorchGridEnv``.
    """

    gym_id = "MinAtar/SpaceInvaders-v1"
    channels = ("cannon", "alien", "alien_left", "alien_right", "friendly_bullet", "enemy_bullet")
    num_actions = 4
    reset_draws = 0
    num_initial_states = 1

    def __init__(self, *args, ramping: bool = True, **kwargs):
        self.ramping = bool(ramping)
        super().__init__(*args, **kwargs)

    def _build_constants(self) -> None:
        dev = self.device
        cells = torch.arange(CELLS, device=dev)
        row, col = cells // GRID, cells % GRID
        self._cannon_move = torch.tensor([0, -1, 1, 0], device=dev)  # noop, left, right, fire
        wave = (row < 4) & (col >= 2) & (col < 8)
        self._waves = torch.stack((torch.zeros_like(wave), wave))  # [2, 100]: refill or not
        # Which alien shoots: the package searches the columns by distance to the cannon (ties:
        # the left one first, a stable sort) and takes that column's lowest alien. _nearness[c]
        # scores each column for a cannon at c: 20 - its place in that order (> 0).
        x = torch.arange(GRID, device=dev)
        place = 2 * (x - x.unsqueeze(1)).abs() + (x > x.unsqueeze(1)).long()  # [cannon, column]
        self._nearness = (20 - place).to(torch.uint8)  # uint8: products with bool maps stay small
        self._rows_from_1 = torch.arange(1, GRID + 1, device=dev)
        self._column_cells = torch.arange(0, CELLS, GRID, device=dev)  # a column's cells
        self._start = torch.tensor(
            [5, -1, ENEMY_MOVE_INTERVAL, ENEMY_MOVE_INTERVAL, ENEMY_SHOT_INTERVAL, 0, 0, WAVE_SIZE], device=dev
        ).unsqueeze(1)  # [8, 1]
        self._start_maps = torch.stack((wave, torch.zeros_like(wave), torch.zeros_like(wave)))[None]

    def reset_index(self, u: Tensor) -> Tensor:
        """Deterministic resets: initial state 0 for every env (``u`` is ``[0, B]``)."""
        return torch.zeros(u.shape[1], dtype=torch.int64, device=u.device)

    def initial_state(self, index: Tensor) -> SpaceInvadersState:
        # One initial state: expanded views (steps never write into a state's tensors).
        n = index.shape[0]
        return SpaceInvadersState(self._start_maps.expand(n, -1, -1), self._start.expand(-1, n))

    def select(self, mask: Tensor, a: SpaceInvadersState, b: SpaceInvadersState) -> SpaceInvadersState:
        # Bitwise on int32 words: b ^ ((a ^ b) & all-ones where mask).
        n = mask.shape[0]
        a32, b32 = (m.reshape(n, 3 * CELLS).view(torch.int32) for m in (a.maps, b.maps))
        maps = b32 ^ ((a32 ^ b32) & -mask.int().unsqueeze(1))
        return SpaceInvadersState(maps.view(torch.bool).view(n, 3, CELLS), torch.where(mask, a.counters, b.counters))

    def dynamics(
        self, state: SpaceInvadersState, action: Tensor, draws: Tensor
    ) -> tuple[SpaceInvadersState, Tensor, Tensor]:
        """The package's ``Env.act``, in its order.

        Args:
            state: ``B`` games.
            action: ``[B]`` int64 in {0: noop, 1: left, 2: right, 3: fire}.
            draws: ``[0, B]``: the game draws nothing in a step.

        Returns:
            ``(next_state, reward [B] float32, terminated [B] bool)``.
        """
        maps, counters = state
        maps = maps.contiguous()  # flat indices below address maps.view(-1)
        cannon, alien_dir, interval, move_timer, shot_timer, cool_down, ramp, count = counters.unbind(0)
        n, dev = maps.shape[0], maps.device
        env = torch.arange(n, device=dev)
        base = env * 3 * CELLS  # flat index of each env's maps
        fire = (action == 3) & (cool_down == 0)
        cannon = (cannon + self._cannon_move.index_select(0, action)).clamp(0, LAST)
        cool_down = torch.where(fire, SHOT_COOL_DOWN, cool_down)
        at_cannon = cannon + LAST * GRID
        # Bullets move a row (the edge row falls off); a shot fired now is placed on the bottom
        # row before its bullet moves, so it shows one row above the cannon (an empty cell).
        new = torch.empty(maps.shape, dtype=torch.bool, device=dev)  # the next maps
        new[:, 1, : CELLS - GRID] = maps[:, 1, GRID:]
        new[:, 1, CELLS - GRID :] = False
        new[:, 2, GRID:] = maps[:, 2, : CELLS - GRID]
        new[:, 2, :GRID] = False
        flat = new.view(-1)
        shot = base + CELLS + at_cannon - GRID
        flat.index_copy_(0, shot, flat.index_select(0, shot) | fire)
        # A bullet (moved) or an alien (not yet moved) on the cannon.
        hit = flat.index_select(0, base + 2 * CELLS + at_cannon)
        hit = hit | maps.view(-1).index_select(0, base + at_cannon)
        # The aliens move when their timer is 0: down a row and turning at a wall, else sideways.
        aliens = maps[:, 0]
        columns = _any_of_ten(aliens.view(n, GRID, GRID), 1)  # [B, 10]: a column holds aliens
        move = move_timer == 0
        turn = move & torch.where(alien_dir < 0, columns[:, 0], columns[:, LAST])
        hit = hit | (turn & _any_of_ten(aliens[:, CELLS - GRID :], 1))  # turning on the bottom row
        # Candidates [B, 4, 100]: still, left, right (flat shifts by a cell: the column they
        # would wrap from is empty when they move sideways), down (a roll by a row).
        moves = torch.empty((n, 4, CELLS), dtype=torch.bool, device=dev)
        moves[:, 0] = aliens
        moves[:, 1, :-1], moves[:, 1, -1] = aliens[:, 1:], False
        moves[:, 2, 1:], moves[:, 2, 0] = aliens[:, :-1], False
        moves[:, 3, GRID:], moves[:, 3, :GRID] = aliens[:, :-GRID], aliens[:, -GRID:]
        how = torch.where(turn, 3, torch.where(move, (alien_dir + 3) // 2, 0))  # old alien_dir
        aliens = moves.view(-1, CELLS).index_select(0, env * 4 + how)  # [B, 100]
        alien_dir = torch.where(turn, -alien_dir, alien_dir)
        move_timer = torch.where(move, torch.minimum(count, interval), move_timer)
        hit = hit | aliens.view(-1).index_select(0, env * CELLS + at_cannon)
        # Every ENEMY_SHOT_INTERVAL steps the nearest column's lowest alien fires.
        shoot = shot_timer == 0
        shot_timer = torch.where(shoot, ENEMY_SHOT_INTERVAL, shot_timer)
        columns = _any_of_ten(aliens.view(n, GRID, GRID), 1)
        column = (columns.view(torch.uint8) * self._nearness.index_select(0, cannon)).argmax(1)
        in_column = aliens.view(-1).index_select(0, ((env * CELLS + column).unsqueeze(1) + self._column_cells).view(-1))
        row = (in_column.view(n, GRID) * self._rows_from_1).amax(1) - 1
        shot = base + 2 * CELLS + row * GRID + column
        flat.index_copy_(0, shot, flat.index_select(0, shot) | shoot)
        # A friendly bullet on an alien removes both.
        kill = aliens & new[:, 1]
        reward = kill.view(torch.uint8).sum(1)  # int64 (a bool sum converts to int64 first: slow)
        new[:, 1] ^= kill
        count = count - reward
        # A cleared wave: a new one, and (ramping) the aliens of this episode move faster.
        cleared = count == 0
        new[:, 0] = (aliens ^ kill) | self._waves.index_select(0, cleared.long())
        count = torch.where(cleared, WAVE_SIZE, count)
        if self.ramping:
            faster = (cleared & (interval > MIN_MOVE_INTERVAL)).long()
            interval, ramp = interval - faster, ramp + faster
        cool_down = cool_down - (cool_down > 0).long()
        counters = torch.stack((cannon, alien_dir, interval, move_timer - 1, shot_timer - 1, cool_down, ramp, count))
        return SpaceInvadersState(new, counters), reward.float(), hit

    def observe(self, state: SpaceInvadersState, out: Tensor | None = None) -> Tensor:
        """``[N, 6, 10, 10]`` bool: one-hot cannon, aliens (all, if moving left, if moving
        right), friendly and enemy bullets."""
        maps, counters = state
        n = maps.shape[0]
        size = len(self.channels) * CELLS
        if out is None:
            out = torch.empty((n, size), dtype=torch.bool, device=maps.device)
        obs = out.view(n, len(self.channels), CELLS)
        clear(obs[:, 0])
        env = torch.arange(n, device=maps.device)
        draw_cells(out.view(-1), env * size + LAST * GRID + counters[0])
        obs[:, 1] = maps[:, 0]
        # uint8 products: a bool & with a per-env mask broadcast along the cells is slow on CPU
        aliens = maps[:, 0].view(torch.uint8)
        left = (counters[1] < 0).view(torch.uint8).unsqueeze(1)
        obs.view(torch.uint8)[:, 2] = aliens * left
        obs.view(torch.uint8)[:, 3] = aliens * (1 - left)
        obs[:, 4:] = maps[:, 1:]
        return obs.view(n, len(self.channels), GRID, GRID)
