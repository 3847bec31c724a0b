"""MinAtar Seaquest as batched tensors, step for step ``minatar`` 1.0.15's ``MinAtar/Seaquest-v1``.

Source of truth: ``minatar/environments/seaquest.py`` and ``minatar/environment.py`` (sticky
actions, probability 0.1; difficulty ramping on by default). The player's sub moves on rows 0-8
and fires along its heading (every 5 steps at most); fish and enemy subs enter rows 1-8 from
either wall every ``spawn speed`` steps (never against the direction of an enemy already in that
row) and move every ``move speed + 1`` steps; enemy subs fire every 11 steps. +1 per enemy shot.
Divers enter every 30 steps and move every 6; the sub picks them up (six at most). Oxygen runs
down below the surface; surfacing with divers refills it, costs a diver (all six, with a reward
of ``oxygen * 10 // 200``, at six) and ramps the difficulty (spawn speed 20 down to 1; move speed
5 down to 2, every other time). Terminated when the sub meets a fish, an enemy sub or an enemy
bullet, runs out of oxygen, or surfaces with no diver.

Package quirks kept: surfacing with six divers leaves ``diver_count`` at -1 (it is zeroed, then
decremented), so the sub may surface again without divers until it has picked up two more; an
enemy sub shot (or leaving the grid) on the step its shot timer runs out still fires; the state
layout is ``seaquest_state.py``'s.

Randomness: the step's five draws ``u`` ``[5, B]`` answer ``_spawn_enemy`` (when its timer is
0: from the left iff ``u[0] < 1/2``, a sub iff ``u[1] < 1/3``, row ``1 + int(8 * u[2])``) and
``_spawn_diver`` (when its timer is 0: from the left iff ``u[3] < 1/2``, row
``1 + int(8 * u[4])``). Resets are deterministic.

Speed: the 32 enemy slots cover the fastest spawns, but random play keeps 4 of them busy. On
CPU, where reading a tensor costs no sync, a step and an observation run over the slots in use
(and one free slot for a spawn), so a state may hold fewer than 32 (``game_state`` shows all 32);
on CUDA, and while ``torch.compile`` traces, they run over all 32.
"""

from __future__ import annotations

import torch
from torch import Tensor

import distrl.envs.torch_envs.seaquest_state as sq
from distrl.envs.torch_envs.grid import TorchGridEnv, float32_threshold
from distrl.envs.torch_envs.seaquest_state import A, BA, D, ENEMY_SLOTS, G, Y, SeaquestState

__all__ = ["TorchMinAtarSeaquest"]

LAST = 9
SHOT_COOL_DOWN = 5
ENEMY_SHOT_INTERVAL = 10
DIVER_MOVE_INTERVAL = sq.DIVER_MOVE_INTERVAL
DIVER_SPAWN_SPEED = 30
MAX_AGE = 62  # G + 1 + 64 stays an int8


class TorchMinAtarSeaquest(TorchGridEnv):
    """``B`` MinAtar Seaquest games on one device; ``MinAtar/Seaquest-v1`` semantics.

    Observation ``[B, 10, 10, 10]`` bool, channels (sub_front, sub_back, friendly_bullet, trail,
    enemy_bullet, enemy_fish, enemy_sub, oxygen_guage, diver_guage, diver) as the package's
    ``state()`` with channels first. Action ``[B]`` int64 in the minimal set {0: noop, 1: left,
    2: up, 3: right, 4: down, 5: fire}; reward 1 per enemy shot, plus the oxygen bonus.

    Args:
        ramping: the package's ``difficulty_ramping`` (on by default).
        other arguments: see ``TorchGridEnv``.
    """

    gym_id = "MinAtar/Seaquest-v1"
    channels = sq.CHANNEL_NAMES
    num_actions = 6
    step_draws = 5
    reset_draws = 0
    num_initial_states = 1

    def __init__(self, *args, ramping: bool = True, **kwargs):
        self.ramping = bool(ramping)
        self._third = float32_threshold(1 / 3)  # u < 1/3 in float64, as a float32 comparison
        super().__init__(*args, **kwargs)

    def _build_constants(self) -> None:
        dev = self.device
        self._columns: dict[int, sq.Columns] = {}
        self._slot_numbers = torch.arange(1, ENEMY_SLOTS + 1, dtype=torch.int8, device=dev)
        self._observe: dict[int, sq.ObserveConstants] = {}
        self._start = sq.initial_state(1, dev).counters  # [12, 1]: restart's counters (its slots are 0)
        # u < 1/2 (from the left: rows 0 and 3), u < 1/3 (a sub: row 1); rows 2 and 4 unused
        self._below = torch.tensor([[0.5], [self._third], [0.0], [0.5], [0.0]], device=dev)
        # Each action's dx, dy, fire, whether it keeps the heading, the heading it sets otherwise
        # (noop, left, up, right, down, fire): one lookup, where comparing the actions costs five ops.
        effects = [[0, -1, 0, 1, 0, 0], [0, 0, -1, 0, 1, 0], [0, 0, 0, 0, 0, 1], [1, 0, 1, 0, 1, 1], [0, 0, 0, 1, 0, 0]]
        self._effects = [torch.tensor(row, dtype=torch.int16, device=dev) for row in effects]
        self._bonus = sq.oxygen_cells(dev).float()  # the reward for surfacing with six divers, by oxygen

    def _constants(self, n: int) -> sq.Columns:
        """``seaquest_state.Columns`` for ``n`` envs (built once)."""
        if n not in self._columns:
            self._columns[n] = sq.columns(n, self.device)
        return self._columns[n]

    def reset_index(self, u: Tensor) -> Tensor:
        """Deterministic resets: initial state 0 for every env (``u`` is ``[0, B]``)."""
        return torch.zeros(u.shape[1], dtype=torch.int64, device=u.device)

    def initial_state(self, index: Tensor) -> SeaquestState:
        return sq.initial_state(index.shape[0], self.device)

    # ---- the enemy slots in use --------------------------------------------------------------

    def _in_use(self, enemies: Tensor) -> int:
        """How many leading slots of ``enemies`` ``[12, K, B]`` hold an enemy or a bullet in some
        env. Read off the table on CPU, where a host read costs no sync (random play keeps 4 of
        32 slots busy); elsewhere, and while ``torch.compile`` traces, all 32."""
        if self.device.type != "cpu" or torch.compiler.is_compiling():
            return ENEMY_SLOTS
        k = enemies.shape[1]
        if k == 0:
            return 0
        busy = ((enemies[A] | enemies[BA]).amax(1) != 0) * self._slot_numbers[:k]  # [K]
        return int(busy.amax())

    def _fit(self, state: SeaquestState, k: int) -> SeaquestState:
        """``state`` with exactly ``k`` enemy slots: its first ``k`` (a view), or all of them and
        dead ones (0) after."""
        e = state.enemies
        if e.shape[1] >= k:
            return state._replace(enemies=e[:, :k])
        wider = torch.zeros((e.shape[0], k, e.shape[2]), dtype=e.dtype, device=e.device)
        wider[:, : e.shape[1]] = e
        return state._replace(enemies=wider)

    # ---- TorchGridEnv (a state may hold fewer than 32 enemy slots: those after it are dead) ---

    @property
    def game_state(self) -> SeaquestState:
        """The game state of every env (a copy), with all 32 enemy slots."""
        return self._fit(TorchGridEnv.game_state.fget(self), ENEMY_SLOTS)

    @game_state.setter
    def game_state(self, state: SeaquestState) -> None:
        TorchGridEnv.game_state.fset(self, state)

    def select(self, mask: Tensor, a: SeaquestState, b: SeaquestState) -> SeaquestState:
        # One free slot more, as dynamics wants: its state is then a view of this one.
        k = min(ENEMY_SLOTS, max(self._in_use(a.enemies), self._in_use(b.enemies)) + 1)
        return sq.select(mask, self._fit(a, k), self._fit(b, k))

    def restart(self, state: SeaquestState, done: Tensor) -> SeaquestState:
        """On CPU, where reading ``done`` costs no sync, the few finished envs' columns of
        ``state`` are overwritten in place (an index op a tensor: 60 us at 4096 envs with a copy of
        each tensor, where ``select`` over every env takes 162); elsewhere ``select``."""
        if self.device.type != "cpu" or torch.compiler.is_compiling():
            return super().restart(state, done)
        finished = done.nonzero().squeeze(1)
        if finished.numel() == 0:
            return state
        state.counters.index_copy_(1, finished, self._start.expand(-1, finished.numel()))
        for t in state[1:]:
            t.index_fill_(-1, finished, 0)
        return state

    def observe(self, state: SeaquestState, out: Tensor | None = None) -> Tensor:
        """``[N, 10, 10, 10]`` bool; see ``seaquest_state.observe``."""
        n = state.counters.shape[1]
        if n not in self._observe:
            self._observe[n] = sq.observe_constants(n, self.device)
        return sq.observe(self._fit(state, self._in_use(state.enemies)), self._observe[n], out)

    def dynamics(self, state: SeaquestState, action: Tensor, draws: Tensor) -> tuple[SeaquestState, Tensor, Tensor]:
        """The package's ``Env.act``, in its order (the comments name its parts), over the enemy
        slots in use and one more (where a spawn may go).

        At 4096 envs on CPU a step is ~320 aten calls of 1-3 us, and their count, not their
        arithmetic, sets its speed. So masks are bool, read as int8 0/1 with ``.view`` (no copy)
        where arithmetic needs them (a bool operand would be cast); ``any`` is an int8 ``amax``
        (5x faster); comparisons with a scalar and ``torch.where`` stay off the ``[K, B]`` slots
        (7x and 10x slower there than an op of two tensors); the counters are int16 (int64 ops
        cost twice as much); and the two friendly bullets go together as ``[2, K, B]``.

        Args:
            state: ``B`` games.
            action: ``[B]`` int64 in {0: noop, 1: left, 2: up, 3: right, 4: down, 5: fire}.
            draws: ``[5, B]`` float32, the spawns' (see the module docstring).

        Returns:
            ``(next_state, reward [B] float32, terminated [B] bool)``.
        """
        return self._act(self._fit(state, min(ENEMY_SLOTS, self._in_use(state.enemies) + 1)), action, draws)

    def _act(self, state: SeaquestState, action: Tensor, draws: Tensor) -> tuple[SeaquestState, Tensor, Tensor]:
        """``dynamics`` on a state of ``K <= 32`` enemy slots, the next state of as many."""
        i8, i16 = torch.int8, torch.int16
        counters = state.counters.to(i16)
        (sx, sy, right, oxygen, divers, e_speed, e_timer, d_timer, speed, ramp, shot, surface) = counters.unbind(0)
        e, d, f, const = state.enemies, state.divers, state.bullets, self._constants(sx.shape[0])
        low = (draws < self._below).view(i8)  # [5, B] 0/1: rows 0 and 3 from the left, row 1 a sub
        high = low.logical_not().view(i8)
        heads, starts = low - high, high * LAST  # rows 0 and 3: the enemy's heading and x, the diver's
        rows = (draws * 8).to(i8) + 1  # rows 2 and 4: their rows
        # _spawn_enemy: in the first free slot, unless an enemy in its row heads the other way
        # (a dead slot's row is 0, never a spawn's).
        timer = e_timer.logical_not()
        spawn = timer.view(i8) > ((e[Y] == rows[2]) & (e[D] != heads[0])).view(i8).amax(0)  # and not blocked
        free = torch.sub(const.rank[: e.shape[1]], e[A], alpha=64)  # > 0 where free
        chosen = ((free == free.amax(0).clamp(min=1)) & spawn).view(i8)  # [K, B], one-hot or none
        speed8 = speed.to(i8)
        new = torch.stack((const.ones, starts[0], rows[2], heads[0], low[1], speed8, 10 * low[1]))
        fields = torch.addcmul(e[:G], chosen, new.unsqueeze(1))  # [7, K, B]; dead slots are 0
        alive, x, y, heading, is_sub, move_timer, shot_timer = fields.unbind(0)
        age = (e[G] + chosen.amax(0)).clamp(max=MAX_AGE)  # a spawn ages all, the new one to 1
        e_timer = torch.where(timer, e_speed, e_timer)
        # _spawn_diver: into slot 0, or 1 when 0 is taken.
        timer = d_timer.logical_not()
        put = sq.first_free(timer, d[0])
        d_new = torch.stack((const.ones, starts[3], rows[4], heads[3], const.fives))
        d = torch.addcmul(d, put, d_new.unsqueeze(1))  # [5, 2, B]
        d_timer = torch.where(timer, DIVER_SPAWN_SPEED, d_timer)
        # The player: fire (into a free bullet slot) or move; one lookup of the action's effects.
        action = action.int()  # (an int32 index gathers faster)
        dx, dy, fires, keep, turn = (table.index_select(0, action) for table in self._effects)  # [B] int16 each
        fire = fires > shot  # the fire action (1) and no cool-down (0)
        put = sq.first_free(fire, f[0])
        f = torch.addcmul(f, put, torch.stack((torch.ones_like(sx), sx, sy, 2 * right - 1)).to(i8).unsqueeze(1))
        shot = torch.where(fire, SHOT_COOL_DOWN, shot)
        sx, sy = (sx + dx).clamp(0, LAST), (sy + dy).clamp(0, LAST - 1)
        right = torch.addcmul(turn, right, keep)
        px, py = sx.to(i8), sy.to(i8)
        # Friendly bullets move; one on an enemy's cell shoots the first fish there, else the
        # first sub (the oldest of them).
        fa, fx, fy, fd = f.unbind(0)  # [2, B] each
        fx = fx + fd  # a dead slot's fields are 0
        fa = fa.view(torch.bool) & (fx == fx.clamp(0, LAST))
        on_row = y == fy.unsqueeze(1)  # [2, K, B]
        on = alive.view(torch.bool) & (x == fx.unsqueeze(1)) & on_row & fa.unsqueeze(1)
        oldest = torch.sub(age + (1 + 64), is_sub, alpha=64)  # [K, B]: fish before subs, the oldest first
        first = on.view(i8) * oldest
        alive = alive - (on & (first == first.amax(1, keepdim=True))).view(i8).amax(0)
        hit = on.view(i8).amax(1).view(torch.bool)  # [2, B]
        fa, reward = fa & ~hit, hit[0].view(i8) + hit[1].view(i8)
        # Divers, newest (slot 1) first: picked up on the sub's cell, before or after their move
        # (one on the cell that is not picked up moves off it), while fewer than six are aboard.
        d_alive, d_x, d_y, d_heading, d_move = d.unbind(0)  # [2, B] each
        at_row = d_y == py
        meet = d_alive.view(torch.bool) & (d_x == px) & at_row
        move = d_alive.view(torch.bool) & d_move.logical_not()  # unless picked up first: gone then
        d_move = torch.add(d_move - d_alive, move.view(i8), alpha=DIVER_MOVE_INTERVAL + 1)
        d_x = torch.addcmul(d_x, move.view(i8), d_heading)
        inside = d_x == d_x.clamp(0, LAST)
        meet = meet | (move & inside & (d_x == px) & at_row)
        newer = meet[1] & (divers < 6)
        pick = torch.stack((meet[0] & (divers + newer.to(i16) < 6), newer))  # [2, B]
        divers = divers + pick.view(i8).sum(0, dtype=i16)
        d = torch.stack((d_alive, d_x, d_y, d_heading, d_move)) * (inside & ~pick).view(i8)  # dead: 0
        older = (d[0, 1] & ~d[0, 0]) * d[:, 1]  # [5, B]: slot 1's diver into slot 0 when 0 is free
        d = torch.stack((d[:, 0] + older, d[:, 1] - older), 1)
        # Enemy subs, bullets and fish move on their timers (subs first in the package, but only
        # who takes a bullet depends on that: subs before fish, the newest first); touching the
        # sub ends the game.
        live = alive.view(torch.bool)
        at_row = y == py
        hit = live & (x == px) & at_row  # [K, B]: where the sub meets an enemy or a bullet
        move = live & move_timer.logical_not()
        move_timer = torch.addcmul(move_timer - alive, move.view(i8), speed8 + 1)
        x = torch.addcmul(x, move.view(i8), heading)
        in_grid = x == x.clamp(0, LAST)
        inside = move & in_grid
        meet = inside & (x == px) & at_row
        hit = hit | meet
        on = (inside & ~meet) & (x == fx.unsqueeze(1)) & on_row & fa.unsqueeze(1)
        newest = on.view(i8) * (129 - oldest)  # subs before fish, the newest first
        gone = (move & ~inside) | (on & (newest == newest.amax(1, keepdim=True))).view(i8).amax(0).view(torch.bool)
        taken = on.view(i8).amax(1).view(torch.bool)
        fa, reward = fa & ~taken, reward + taken[0].view(i8) + taken[1].view(i8)
        subs = alive & is_sub
        fires = subs.view(torch.bool) & shot_timer.logical_not()  # even a sub shot or gone this step fires
        shot_timer = torch.add(shot_timer - subs, fires.view(i8), alpha=ENEMY_SHOT_INTERVAL + 1)
        fires = (fires & in_grid).view(i8)  # a bullet off the grid is gone at once
        b_alive, b_x, b_y, b_heading = torch.addcmul(e[BA:], fires, torch.stack((alive, x, y, heading))).unbind(0)
        alive = alive - gone.view(i8)
        at_row = b_alive.view(torch.bool) & (b_y == py)
        hit = hit | (at_row & (b_x == px))
        b_x = b_x + b_heading
        b_live = b_x == b_x.clamp(0, LAST)
        hit = hit | (at_row & b_live & (b_x == px))
        b_live = b_live & b_alive.view(torch.bool)
        terminated = hit.view(i8).amax(0).view(torch.bool)
        # Timers; oxygen; surfacing.
        e_timer, d_timer, shot = torch.stack((e_timer, d_timer, shot)).sub_(1).clamp_(min=0).unbind(0)
        terminated = terminated | (oxygen <= 0)
        below = sy.bool()
        oxygen = oxygen - below.to(i16)
        arrive = (sy | surface).logical_not()
        surface = surface * (~below).to(i16)
        terminated = terminated | (arrive & divers.logical_not())
        rescue = arrive & divers.bool()  # _surface()
        full = (rescue & (divers == 6)).to(i16)
        bonus = self._bonus.index_select(0, (oxygen * full).clamp(min=0).int())  # oxygen * 10 // 200
        rescue16 = rescue.to(i16)
        divers = torch.sub(divers - rescue16, full, alpha=6)  # six: zeroed, then one less (-1)
        oxygen = torch.where(rescue, sq.MAX_OXYGEN, oxygen)
        surface = surface | rescue16
        if self.ramping:  # spawns every step at the fastest (1), moves every third (2)
            ramps = rescue16 & (e_speed + speed > 3).to(i16)  # one of them can still ramp
            speed = (speed - (rescue16 & ramp)).clamp(min=2)  # on every other ramp (odd before it)
            e_speed, ramp = (e_speed - rescue16).clamp(min=1), ramp + ramps
        counters = torch.stack((sx, sy, right, oxygen, divers, e_speed, e_timer, d_timer, speed, ramp, shot, surface))
        enemies = torch.stack((alive, x, y, heading, is_sub, move_timer, shot_timer, age))
        enemies = torch.cat((enemies * alive, torch.stack((b_alive, b_x, b_y, b_heading)) * b_live.view(i8)))
        bullets = torch.stack((fa.view(i8), fx, fy, fd)) * fa.view(i8)
        return SeaquestState(counters, enemies, bullets, d), reward.float() + bonus, terminated
