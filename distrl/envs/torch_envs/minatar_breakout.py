"""MinAtar Breakout as batched tensors, step for step ``minatar`` 1.0.15's ``MinAtar/Breakout-v1``.

Source of truth: ``minatar/environments/breakout.py`` and ``minatar/environment.py`` (sticky
actions, probability 0.1). The paddle sits on the bottom row; the ball moves one cell along a
diagonal per step, reflects off walls, the ceiling and bricks (+1 per brick broken) and bounces
off the paddle; when it reaches the bottom row past the paddle the episode terminates. The three
rows of bricks are refilled when the ball reaches the bottom row with none left.

The whole state is nine int64 counters per env, ``BreakoutState.counters`` ``[9, B]``: ball x,
ball y, ball dx, ball dy, paddle x, trail x, trail y, strike, bricks. Bricks only ever occupy
rows 1-3, so they are a 30-bit mask (bit ``(y - 1) * 10 + x``); a step is a few dozen ops on
``[B]`` rows. The package's ``ball_dir`` 0..3 is the sign pair ``(dx, dy)``: 0 = (-1, -1),
1 = (+1, -1), 2 = (+1, +1), 3 = (-1, +1); its reflections ``[1,0,3,2]``, ``[3,2,1,0]`` and
``[2,3,0,1]`` flip dx, dy and both. ``strike`` is the package's flag that lets a ball which
just broke a brick pass through another one on the next step.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from distrl.envs.torch_envs.cells import clear, draw_cells
from distrl.envs.torch_envs.grid import GRID, TorchGridEnv

__all__ = ["BreakoutState", "TorchMinAtarBreakout"]

LAST = GRID - 1  # the bottom row and the rightmost column
ALL_BRICKS = (1 << 3 * GRID) - 1


class BreakoutState(NamedTuple):
    """``B`` Breakout games (see the module docstring)."""

    counters: Tensor  # [9, B] int64: ball_x, ball_y, dx, dy, paddle, trail_x, trail_y, strike, bricks


class TorchMinAtarBreakout(TorchGridEnv):
    """``B`` MinAtar Breakout games on one device; ``MinAtar/Breakout-v1`` semantics.

    Observation ``[B, 4, 10, 10]`` bool, channels (paddle, ball, trail, brick) as the package's
    ``state()`` with channels first; the trail is where the ball was one step before. Action
    ``[B]`` int64 in the minimal set {0: noop, 1: left, 2: right}; reward 1 per brick broken;
    terminated when the ball passes the paddle. A reset puts the ball at row 3 on the left wall
    heading down-right or on the right wall heading down-left (the package's ``randint(2)``,
    here ``int(2 * u)`` of the reset's draw), the paddle at column 4 and bricks on rows 1-3.
    Constructor arguments: see ``TorchGridEnv``.
    """

    gym_id = "MinAtar/Breakout-v1"
    channels = ("paddle", "ball", "trail", "brick")
    num_actions = 3
    reset_draws = 1
    num_initial_states = 2

    def _build_constants(self) -> None:
        dev = self.device
        self._paddle_move = torch.tensor([0, -1, 1], device=dev)  # noop, left, right
        # Counters after a reset: start + side * other_side, side the package's randint(2):
        # side 0: ball_x 0, ball_dir 2 (down-right); side 1: ball_x 9, ball_dir 3 (down-left).
        self._start = torch.tensor([0, 3, 1, 1, 4, 0, 3, 0, ALL_BRICKS], device=dev).unsqueeze(1)
        self._other_side = torch.tensor([LAST, 0, -2, 0, 0, LAST, 0, 0, 0], device=dev).unsqueeze(1)
        # Byte j of _spread[g] is bit j of g (native byte order: the table is built as bytes).
        bits = torch.arange(256).unsqueeze(1) >> torch.arange(8) & 1
        self._spread = bits.to(torch.uint8).view(torch.int64).squeeze(1).to(dev)
        # The bricks' cells 310-339 lie in the 8-byte words 38-42 of an observation (cells
        # 304-343): word k holds bits 8k-6 .. 8k+1 of the mask.
        self._word_shift = torch.arange(0, 40, 8, device=dev)

    def reset_index(self, u: Tensor) -> Tensor:
        """``u`` ``[1, B]``: the package's ``randint(2)`` as ``int(2 * u)`` (0: left wall)."""
        return (u[0] * 2).long()

    def initial_state(self, index: Tensor) -> BreakoutState:
        return BreakoutState(self._start + self._other_side * index)

    def select(self, mask: Tensor, a: BreakoutState, b: BreakoutState) -> BreakoutState:
        return BreakoutState(torch.where(mask, a.counters, b.counters))

    def dynamics(self, state: BreakoutState, action: Tensor, draws: Tensor) -> tuple[BreakoutState, Tensor, Tensor]:
        """The package's ``Env.act``; the comments name its branches.

        Args:
            state: ``B`` games.
            action: ``[B]`` int64 in {0: noop, 1: left, 2: right}.
            draws: ``[0, B]``: the game draws nothing in a step.

        Returns:
            ``(next_state, reward [B] float32, terminated [B] bool)``.
        """
        bx, by, dx, dy, paddle, _, _, strike, bricks = state.counters.unbind(0)
        paddle = (paddle + self._paddle_move.index_select(0, action)).clamp_(0, LAST)
        nx, ny = bx + dx, by + dy
        x = nx.clamp(0, LAST)
        wall = x != nx  # hit a side wall: clamped, dx flips
        top = ny < 0  # hit the ceiling: y = 0, dy flips
        # elif brick_map[new_y, new_x]: only rows 1-3 hold bricks (the ceiling comes first)
        bit = ((ny - 1) * GRID + x).clamp_(0, 3 * GRID - 1)
        on_brick = (ny >= 1) & (ny <= 3) & ((bricks >> bit) & 1).bool()
        broke = on_brick & (strike == 0)  # ... and no brick was broken on the step before
        bricks = bricks ^ (broke.long() << bit)
        # elif new_y == 9: refill an empty wall, then the paddle
        bottom = ny == LAST
        bricks = torch.where(bottom & (bricks == 0), ALL_BRICKS, bricks)
        straight = bottom & (bx == paddle)  # the ball was above the paddle: dy flips
        diagonal = bottom & ~straight & (x == paddle)  # it reaches the paddle's cell: both flip
        terminated = bottom & ~(straight | diagonal)
        bounce = broke | straight | diagonal  # the ball stays on its row (new_y = last_y)
        dx = torch.where(wall ^ diagonal, -dx, dx)
        dy = torch.where(top | bounce, -dy, dy)
        y = torch.where(bounce, by, ny.clamp(min=0))
        counters = torch.stack((x, y, dx, dy, paddle, bx, by, on_brick.long(), bricks))
        return BreakoutState(counters), broke.float(), terminated

    def observe(self, state: BreakoutState, out: Tensor | None = None) -> Tensor:
        """``[N, 4, 10, 10]`` bool: one-hot paddle (bottom row), ball and trail; the bricks.

        Written as a zeroed buffer, one ``draw_cells`` of the one-hot cells and the bricks'
        bytes (the 30 bits spread to bytes by a 256-entry table) copied in as 8-byte words.
        """
        bx, by, _, _, paddle, tx, ty, _, bricks = state.counters.unbind(0)
        n, size = bx.shape[0], len(self.channels) * GRID * GRID
        if out is None:
            out = torch.empty((n, size), dtype=torch.bool, device=bx.device)
        clear(out)
        row = torch.arange(n, device=bx.device) * size
        cells = torch.stack((paddle + LAST * GRID, by * GRID + bx + 100, ty * GRID + tx + 200))
        draw_cells(out.view(-1), cells + row)
        groups = ((bricks << 6).unsqueeze(1) >> self._word_shift) & 255  # [N, 5]
        out.view(torch.int64)[:, 38:43] = self._spread.index_select(0, groups.view(-1)).view(n, 5)
        return out.view(n, len(self.channels), GRID, GRID)
