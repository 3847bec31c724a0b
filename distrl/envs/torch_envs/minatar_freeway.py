"""MinAtar Freeway as batched tensors, step for step ``minatar`` 1.0.15's ``MinAtar/Freeway-v1``.

Source of truth: ``minatar/environments/freeway.py`` and ``minatar/environment.py`` (sticky
actions, probability 0.1). The chicken starts on the bottom row in column 4 and moves up or
down a row at most every 3 steps; eight cars, one on each of rows 1-8, drive along their row and
wrap around at the walls, a car of speed ``s`` moving every ``s + 1`` steps. +1 when the chicken
reaches the top row, which sends it back to the bottom and draws new car speeds (positions stay);
a car on the chicken's cell sends it back to the bottom. The game ends (terminated) after 2,501
steps; it has no difficulty ramp.

State (``FreewayState``): int64 counters ``[3, B]`` (chicken row, move timer, terminate timer)
and the cars ``[3, 8, B]`` int8 (x, move timer, signed speed: positive moves right), car ``i``
on row ``i + 1`` as in the package's ``cars`` list.

Randomness: the package's ``_randomize_cars`` draws ``randint(1, 6, 8)`` (speeds) and
``rand(8)`` (directions, ``sign(u - 1/2)``); here speed ``1 + int(5 * u)`` in float64 of eight
draws and the sign of eight more. A step's 16 draws ``u[1:17]`` serve the randomization of the
step that reaches the top, a reset's 16 (``R = 16``) the next episode's cars. The 11^8 initial
states (a speed of -5..5 per car) are numbered by the base-11 digits ``speed + 5``, too many to
tabulate their observations. A draw of exactly 1/2 (probability 2^-24) makes a car of speed 0,
as in the package: it moves left every step; the package's ``state()`` then draws its trail in
the previous car's speed channel (or raises, for car 0), and this env draws none.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from distrl.envs.torch_envs.cells import clear, draw_cells
from distrl.envs.torch_envs.grid import GRID, TorchGridEnv

__all__ = ["FreewayState", "TorchMinAtarFreeway"]

LAST = GRID - 1
CARS = 8
COLUMN = 4  # the chicken's column
PLAYER_SPEED = 3
TIME_LIMIT = 2500
DIGIT = 11  # speeds -5..5 as the digits of an initial state's number


class FreewayState(NamedTuple):
    """``B`` Freeway games (see the module docstring)."""

    counters: Tensor  # [3, B] int64: chicken row, move timer, terminate timer
    cars: Tensor  # [3, 8, B] int8: x, move timer, signed speed; car i on row i + 1


def car_speeds(u: Tensor) -> Tensor:
    """``_randomize_cars``' signed speeds ``[8, B]`` int8 from its 16 draws ``u`` ``[16, B]``."""
    speed = (u[:CARS].double() * 5).to(torch.int8) + 1
    sign = (u[CARS:] > 0.5).to(torch.int8) - (u[CARS:] < 0.5).to(torch.int8)
    return speed * sign


class TorchMinAtarFreeway(TorchGridEnv):
    """``B`` MinAtar Freeway games on one device; ``MinAtar/Freeway-v1`` semantics.

    Observation ``[B, 7, 10, 10]`` bool, channels (chicken, car, speed1, ..., speed5) as the
    package's ``state()`` with channels first: a car's trail, the cell behind it (wrapping), is
    drawn in the channel of its speed. Action ``[B]`` int64 in the minimal set {0: noop, 1: up,
    2: down}; reward 1 per crossing. Constructor arguments: see ``TorchGridEnv`` (the game ends
    itself after 2,501 steps, before the default time limit).
    """

    gym_id = "MinAtar/Freeway-v1"
    channels = ("chicken", "car", "speed1", "speed2", "speed3", "speed4", "speed5")
    num_actions = 3
    step_draws = 2 * CARS
    reset_draws = 2 * CARS
    num_initial_states = None  # 11^8

    def _build_constants(self) -> None:
        dev = self.device
        self._move = torch.tensor([0, -1, 1], device=dev)  # noop, up, down
        self._place = DIGIT ** torch.arange(CARS, device=dev).unsqueeze(1)  # [8, 1]
        self._start = torch.tensor([LAST, PLAYER_SPEED, TIME_LIMIT], device=dev).unsqueeze(1)
        self._car_cells = torch.arange(GRID, GRID * (CARS + 1), GRID, dtype=torch.int32, device=dev).unsqueeze(1)

    def reset_index(self, u: Tensor) -> Tensor:
        """``u`` ``[16, B]``: the reset's ``_randomize_cars``, as an initial state's number."""
        return ((car_speeds(u).long() + 5) * self._place).sum(0)

    def initial_state(self, index: Tensor) -> FreewayState:
        speed = (index // self._place % DIGIT - 5).to(torch.int8)  # [8, N]
        cars = torch.stack((torch.zeros_like(speed), speed.abs(), speed))
        return FreewayState(self._start.expand(-1, index.shape[0]), cars)

    def select(self, mask: Tensor, a: FreewayState, b: FreewayState) -> FreewayState:
        # Bitwise on the int8 cars (torch.where is slow on CPU): b ^ ((a ^ b) & all-ones where mask).
        cars = b.cars ^ ((a.cars ^ b.cars) & -mask.to(torch.int8))
        return FreewayState(torch.where(mask, a.counters, b.counters), cars)

    def dynamics(self, state: FreewayState, action: Tensor, draws: Tensor) -> tuple[FreewayState, Tensor, Tensor]:
        """The package's ``Env.act``, in its order.

        Args:
            state: ``B`` games.
            action: ``[B]`` int64 in {0: noop, 1: up, 2: down}.
            draws: ``[16, B]`` float32: the new car speeds if the chicken reaches the top.

        Returns:
            ``(next_state, reward [B] float32, terminated [B] bool)``.
        """
        pos, move_timer, terminate_timer = state.counters.unbind(0)
        x, timer, speed = state.cars.unbind(0)  # [8, B] int8
        n, i8 = pos.shape[0], torch.int8
        ready = move_timer == 0
        step = self._move.index_select(0, action) * ready
        pos = (pos + step).clamp(0, LAST)
        move_timer = torch.where(step != 0, PLAYER_SPEED, move_timer)
        # The top: +1, new speeds (and move timers), back to the bottom.
        won = pos == 0
        new = car_speeds(draws)
        w = won.to(i8)
        speed = speed + w * (new - speed)
        timer = timer + w * (new.abs() - timer)
        pos = torch.where(won, LAST, pos)
        # The cars move when their timer is up; only the car of the chicken's row (pos - 1) can
        # meet it, on the chicken's column, before or after its move.
        move = (timer == 0).to(i8)
        timer = timer - 1 + move * (speed.abs() + 1)
        heading = 2 * (speed > 0).to(i8) - 1  # speed 0 moves left, as the package's ``else -1``
        moved = x + move * heading
        moved = moved + GRID * ((moved < 0).to(i8) - (moved > LAST).to(i8))
        on_road = (pos >= 1) & (pos <= CARS)
        mine = (pos - 1).clamp(0, CARS - 1) * n + torch.arange(n, device=pos.device)
        before, after = x.view(-1).index_select(0, mine), moved.view(-1).index_select(0, mine)
        hit = on_road & ((before == COLUMN) | (after == COLUMN))
        pos = torch.where(hit, LAST, pos)
        move_timer = move_timer - (move_timer > 0).long()
        terminate_timer = terminate_timer - 1
        counters = torch.stack((pos, move_timer, terminate_timer))
        return FreewayState(counters, torch.stack((moved, timer, speed))), won.float(), terminate_timer < 0

    def observe(self, state: FreewayState, out: Tensor | None = None) -> Tensor:
        """``[N, 7, 10, 10]`` bool: one-hot chicken; each car and its trail in its speed's channel.

        One ``draw_cells`` of a zeroed buffer (a speed-0 car's trail goes to the chicken's cell).
        """
        pos = state.counters[0]
        x, _, speed = state.cars.int().unbind(0)  # [8, N]; int32 arithmetic is faster
        n, size = pos.shape[0], len(self.channels) * GRID * GRID
        if out is None:
            out = torch.empty((n, size), dtype=torch.bool, device=pos.device)
        clear(out)
        base = torch.arange(0, n * size, size, dtype=torch.int32, device=pos.device)
        chicken = (pos * GRID + COLUMN).int() + base  # [N] flat
        back = x + 1 - 2 * (speed > 0).int()
        back = back + GRID * ((back < 0).int() - (back > LAST).int())
        car = self._car_cells + base
        trail = car + back + 100 * (1 + speed.abs())
        trail = chicken + (speed != 0).int() * (trail - chicken)
        cells = torch.cat((chicken.unsqueeze(0), car + x + 100, trail))
        draw_cells(out.view(-1), cells.long())
        return out.view(n, len(self.channels), GRID, GRID)
