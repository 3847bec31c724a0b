"""MinAtar Asterix as batched tensors, step for step ``minatar`` 1.0.15's ``MinAtar/Asterix-v1``.

Source of truth: ``minatar/environments/asterix.py`` and ``minatar/environment.py`` (sticky
actions, probability 0.1; difficulty ramping on by default). The player moves in the four
directions on rows 1-8; every ``spawn speed`` steps an enemy or (one in three) a gold piece
enters an empty row from the left or the right wall, and every ``move speed + 1`` steps all of
them move one cell, leaving when they pass the far wall. +1 per gold piece picked up;
terminated when an enemy touches the player. With ramping, every 102 steps the spawn speed
drops by one (10 down to 1) and, every other time, the move speed (5 down to 1).

State (``AsterixState``): int64 counters ``[8, B]`` (player x, player y, spawn speed, spawn
timer, move speed, move timer, ramp timer, ramp index) and the eight entity slots ``[4, 8, B]``
int8 (alive, x, moving right, gold), slot ``i`` on row ``i + 1`` as in the package's
``entities`` list (one entity per row); a dead slot's fields are 0.

Randomness: the step's three draws ``u`` ``[3, B]`` answer the package's ``_spawn_entity``
when the spawn timer is 0: from the left iff ``u[0] < 1/2``, gold iff ``u[1] < 1/3``, and the
slot the ``int(n * u[2])``-th of the ``n`` empty ones (in float64, as the package's
``randint(n)``; no slot, and no third draw in the package, when none is empty).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from distrl.envs.torch_envs.cells import clear, draw_cells
from distrl.envs.torch_envs.grid import GRID, TorchGridEnv, float32_threshold

__all__ = ["AsterixState", "TorchMinAtarAsterix"]

LAST = GRID - 1
SLOTS = 8  # one entity per row 1..8
RAMP_INTERVAL = 100
INIT_SPAWN_SPEED = 10
INIT_MOVE_INTERVAL = 5


class AsterixState(NamedTuple):
    """``B`` Asterix games (see the module docstring)."""

    # [8, B] int64: player_x, player_y, spawn_speed, spawn_timer, move_speed, move_timer,
    # ramp_timer, ramp_index
    counters: Tensor
    entities: Tensor  # [4, 8, B] int8: alive, x, right, gold; slot i on row i + 1


class TorchMinAtarAsterix(TorchGridEnv):
    """``B`` MinAtar Asterix games on one device; ``MinAtar/Asterix-v1`` semantics.

    Observation ``[B, 4, 10, 10]`` bool, channels (player, enemy, trail, gold) as the package's
    ``state()`` with channels first; an entity's trail is the cell behind it (none at a wall).
    Action ``[B]`` int64 in the minimal set {0: noop, 1: left, 2: up, 3: right, 4: down}; reward
    1 per gold piece. Resets are deterministic (player at (5, 5), no entities).

    Args:
        ramping: the package's ``difficulty_ramping`` (on by default).
        other arguments: see ``TorchGridEnv``.
    """

    gym_id = "MinAtar/Asterix-v1"
    channels = ("player", "enemy", "trail", "gold")
    num_actions = 5
    step_draws = 3
    reset_draws = 0
    num_initial_states = 1

    def __init__(self, *args, ramping: bool = True, **kwargs):
        self.ramping = bool(ramping)
        self._third = float32_threshold(1 / 3)  # u < 1/3 in float64, as a float32 comparison
        super().__init__(*args, **kwargs)

    def _build_constants(self) -> None:
        dev = self.device
        self._dx = torch.tensor([0, -1, 0, 1, 0], device=dev)  # noop, left, up, right, down
        self._dy = torch.tensor([0, 0, -1, 0, 1], device=dev)
        self._start = torch.tensor(
            [5, 5, INIT_SPAWN_SPEED, INIT_SPAWN_SPEED, INIT_MOVE_INTERVAL, INIT_MOVE_INTERVAL, RAMP_INTERVAL, 0],
            device=dev,
        ).unsqueeze(1)
        self._no_entities = torch.zeros((4, SLOTS, 1), dtype=torch.int8, device=dev)
        rows = torch.arange(1, SLOTS + 1, dtype=torch.int32, device=dev)
        self._slot_cells = (rows * GRID).unsqueeze(1)  # [8, 1]: the first cell of each slot's row

    def reset_index(self, u: Tensor) -> Tensor:
        """Deterministic resets: initial state 0 for every env (``u`` is ``[0, B]``)."""
        return torch.zeros(u.shape[1], dtype=torch.int64, device=u.device)

    def initial_state(self, index: Tensor) -> AsterixState:
        # One initial state: expanded views (steps never write into a state's tensors).
        n = index.shape[0]
        return AsterixState(self._start.expand(-1, n), self._no_entities.expand(-1, -1, n))

    def select(self, mask: Tensor, a: AsterixState, b: AsterixState) -> AsterixState:
        # Bitwise on the int8 slots (torch.where is slow on CPU): b ^ ((a ^ b) & all-ones where mask).
        entities = b.entities ^ ((a.entities ^ b.entities) & -mask.to(torch.int8))
        return AsterixState(torch.where(mask, a.counters, b.counters), entities)

    def dynamics(self, state: AsterixState, action: Tensor, draws: Tensor) -> tuple[AsterixState, Tensor, Tensor]:
        """The package's ``Env.act``, in its order.

        Args:
            state: ``B`` games.
            action: ``[B]`` int64 in {0: noop, 1: left, 2: up, 3: right, 4: down}.
            draws: ``[3, B]`` float32, the spawn's (see the module docstring).

        Returns:
            ``(next_state, reward [B] float32, terminated [B] bool)``.
        """
        px, py, spawn_speed, spawn_timer, move_speed, move_timer, ramp_timer, ramp_index = state.counters.unbind(0)
        alive, ex, right, gold = state.entities.unbind(0)  # [8, B] int8 each, 0/1 but x
        n, i8 = px.shape[0], torch.int8
        # _spawn_entity when the timer is up, in the k-th empty slot: where the running count of
        # empty slots reaches k + 1 (int8 0/1 products: bool masks and torch.where are slow here).
        spawn = spawn_timer == 0
        free = 1 - alive
        k = (draws[2].double() * free.sum(0)).to(i8)
        chosen = free * (free.cumsum(0, dtype=i8) == k + 1) * spawn.to(i8)
        from_left = (draws[0] < 0.5).to(i8)
        alive = alive | chosen  # a dead slot's fields are 0: new values are added
        ex = ex + chosen * (LAST - LAST * from_left)
        right = right | chosen * from_left
        gold = gold | chosen * (draws[1] < self._third).to(i8)
        spawn_timer = torch.where(spawn, spawn_speed, spawn_timer)
        # The player moves (rows 1-8); only the entity of its row, slot py - 1, can meet it.
        px = (px + self._dx.index_select(0, action)).clamp(0, LAST)
        py = (py + self._dy.index_select(0, action)).clamp(1, SLOTS)
        mine = (py - 1) * n + torch.arange(n, device=px.device)  # flat index of the slot in [8, B]
        p_alive, p_x, p_gold = (t.view(-1).index_select(0, mine) for t in (alive, ex, gold))
        p_alive, p_x, p_gold = p_alive.bool(), p_x.long(), p_gold.bool()
        met = p_alive & (p_x == px)
        picked = met & p_gold
        hit = met & ~p_gold
        p_alive = p_alive & ~picked  # picked gold leaves; an enemy stays
        # Every entity moves when the move timer is up, and leaves past a wall.
        move = move_timer == 0
        move_timer = torch.where(move, move_speed, move_timer)
        step = (2 * right - 1) * alive * move.to(i8)
        ex = ex + step
        alive = alive * ((ex >= 0) & (ex <= LAST)).to(i8)
        p_x = p_x + step.view(-1).index_select(0, mine)
        met = move & p_alive & (p_x >= 0) & (p_x <= LAST) & (p_x == px)
        picked2 = met & p_gold
        hit = hit | (met & ~p_gold)
        alive.view(-1).index_copy_(0, mine, alive.view(-1).index_select(0, mine) * ~(picked | picked2))
        reward = picked.float() + picked2.float()
        spawn_timer, move_timer = spawn_timer - 1, move_timer - 1
        if self.ramping:
            # Every RAMP_INTERVAL + 2 steps while a speed is above 1 (the timer runs down to -1).
            can = (spawn_speed > 1) | (move_speed > 1)
            ramp = can & (ramp_timer < 0)
            ramp_timer = torch.where(ramp, RAMP_INTERVAL, ramp_timer - can.long())
            move_speed = move_speed - (ramp & (move_speed > 1) & (ramp_index % 2 == 1)).long()
            spawn_speed = spawn_speed - (ramp & (spawn_speed > 1)).long()
            ramp_index = ramp_index + ramp.long()
        counters = torch.stack((px, py, spawn_speed, spawn_timer, move_speed, move_timer, ramp_timer, ramp_index))
        entities = torch.stack((alive, ex, right, gold)) * alive  # dead slots: all 0
        return AsterixState(counters, entities), reward, hit

    def observe(self, state: AsterixState, out: Tensor | None = None) -> Tensor:
        """``[N, 4, 10, 10]`` bool: one-hot player; each entity (enemy or gold) and its trail.

        One ``draw_cells`` of a zeroed buffer; a cell not to be drawn (a dead slot, a trail
        beyond a wall) is sent to the player's cell instead, which is set anyway.
        """
        px, py = state.counters[0], state.counters[1]
        alive, ex, right, gold = state.entities.int().unbind(0)  # [8, N]; int32 arithmetic is faster
        n, size = px.shape[0], len(self.channels) * GRID * GRID
        if out is None:
            out = torch.empty((n, size), dtype=torch.bool, device=px.device)
        clear(out)
        base = torch.arange(0, n * size, size, dtype=torch.int32, device=px.device)
        player = (py * GRID + px).int() + base  # [N] flat
        back = ex + 1 - 2 * right
        shown = alive * ((back >= 0) & (back <= LAST))  # a trail in the grid
        body = self._slot_cells + ex + base + 100 + 200 * gold  # [8, N]: enemy (1) or gold (3)
        trail = self._slot_cells + back + base + 200
        cells = torch.cat((player.unsqueeze(0), player + alive * (body - player), player + shown * (trail - player)))
        draw_cells(out.view(-1), cells.long())
        return out.view(n, len(self.channels), GRID, GRID)
