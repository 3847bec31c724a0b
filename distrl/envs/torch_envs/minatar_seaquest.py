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
from distrl.envs.torch_envs.seaquest_state import A, BA, BD, BX, BY, D, ENEMY_SLOTS, G, H, S, T, X, Y, SeaquestState

__all__ = ["TorchMinAtarSeaquest"]

LAST = 9
SHOT_COOL_DOWN = 5
ENEMY_SHOT_INTERVAL = 10
DIVER_MOVE_INTERVAL = 5
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
        self._dx = torch.tensor([0, -1, 0, 1, 0, 0], device=dev)  # noop, left, up, right, down, fire
        self._dy = torch.tensor([0, 0, -1, 0, 1, 0], device=dev)
        self._ranks: dict[int, Tensor] = {}
        self._slot_numbers = torch.arange(1, ENEMY_SLOTS + 1, dtype=torch.int8, device=dev)
        self._observe: dict[int, sq.ObserveConstants] = {}
        self._start = sq.initial_state(1, dev).counters  # [12, 1]: restart's counters (its slots are 0)

    def _rank(self, n: int) -> Tensor:
        """``[32, n]`` int8, ``32 - slot``: the first of a set of slots has the largest (a
        materialised tensor: an op broadcasting a ``[32, 1]`` column is slow on CPU)."""
        if n not in self._ranks:
            rank = torch.arange(ENEMY_SLOTS, 0, -1, dtype=torch.int8, device=self.device)
            self._ranks[n] = rank.unsqueeze(1).expand(-1, n).contiguous()
        return self._ranks[n]

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
        """On CPU, where reading ``done`` costs no sync, the few finished envs' columns are
        overwritten (a copy of each tensor and an index op: 60 us at 4096 envs, where ``select``
        over every env takes 162); elsewhere ``select``."""
        if self.device.type != "cpu" or torch.compiler.is_compiling():
            return super().restart(state, done)
        finished = done.nonzero().squeeze(1)
        if finished.numel() == 0:
            return state
        counters = state.counters.index_copy(1, finished, self._start.expand(-1, finished.numel()))
        return SeaquestState(counters, *(t.index_fill(-1, finished, 0) for t in state[1:]))

    def observe(self, state: SeaquestState, out: Tensor | None = None) -> Tensor:
        """``[N, 10, 10, 10]`` bool; see ``seaquest_state.observe``."""
        n = state.counters.shape[1]
        if n not in self._observe:
            self._observe[n] = sq.observe_constants(n, self.device)
        return sq.observe(self._fit(state, self._in_use(state.enemies)), self._observe[n], out)

    def dynamics(self, state: SeaquestState, action: Tensor, draws: Tensor) -> tuple[SeaquestState, Tensor, Tensor]:
        """The package's ``Env.act``, in its order (the comments name its parts), over the enemy
        slots in use and one more (where a spawn may go).

        Int8 0/1 products stand for masks where the ops run over ``[32, B]`` slots (bool masks,
        comparisons with a scalar and ``torch.where`` are several times slower there on CPU),
        and the two bullet slots go together as ``[2, 32, B]``.

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
        (sx, sy, right, oxygen, divers, e_speed, e_timer, d_timer, speed, ramp, shot, surface) = state.counters
        n, i8 = sx.shape[0], torch.int8
        alive, y, heading_of = state.enemies[A], state.enemies[Y], state.enemies[D]
        speed8 = speed.to(i8)
        # _spawn_enemy: in the first free slot, unless an enemy in its row heads the other way.
        spawn = e_timer == 0
        heading = 2 * (draws[0] < 0.5).to(i8) - 1  # from the left: +1
        is_sub = (draws[1] < self._third).to(i8)
        row = (draws[2] * 8).to(i8) + 1
        blocked = (alive * (y == row) * (heading_of != heading)).amax(0)
        free = (1 - alive) * self._rank(n)[: alive.shape[0]]
        top = free.amax(0)  # 0: no free slot
        chosen = (free == top) * ((spawn & (blocked == 0)).to(i8) * top.clamp(max=1))  # [K, B], one-hot or 0
        new = (torch.ones_like(row), LAST * (heading < 0).to(i8), row, heading, is_sub, speed8, 10 * is_sub)
        e = list((state.enemies[:G] + chosen * torch.stack(new).unsqueeze(1)).unbind(0))  # dead slots are 0
        e.append((state.enemies[G] + chosen.amax(0)).clamp(max=MAX_AGE))  # a spawn ages all, the new one to 1
        e += state.enemies[BA:].unbind(0)  # [K, B] int8 each
        e_timer = torch.where(spawn, e_speed, e_timer)
        # _spawn_diver: into slot 0, or 1 when 0 is taken.
        d = state.divers  # [5, 2, B]: alive, x, y, heading, timer
        d_spawn = d_timer == 0
        d_heading = 2 * (draws[3] < 0.5).to(i8) - 1
        put = torch.stack((1 - d[0, 0], d[0, 0] * (1 - d[0, 1]))) * d_spawn.to(i8)  # [2, B]
        d_new = (torch.ones_like(d_heading), LAST * (d_heading < 0).to(i8), (draws[4] * 8).to(i8) + 1, d_heading)
        d = list((d + put * torch.stack((*d_new, DIVER_MOVE_INTERVAL * d_new[0])).unsqueeze(1)).unbind(0))
        d_timer = torch.where(d_spawn, DIVER_SPAWN_SPEED, d_timer)
        # The player: fire (into a free bullet slot) or move.
        fire = (action == 5) & (shot == 0)
        f = state.bullets  # [4, 2, B]: alive, x, y, heading
        put = torch.stack((1 - f[0, 0], f[0, 0] * (1 - f[0, 1]))) * fire.to(i8)  # [2, B]
        f = f + put * torch.stack((torch.ones_like(sx), sx, sy, 2 * right - 1)).to(i8).unsqueeze(1)
        shot = torch.where(fire, SHOT_COOL_DOWN, shot)
        sx = (sx + self._dx.index_select(0, action)).clamp(0, LAST)
        sy = (sy + self._dy.index_select(0, action)).clamp(0, LAST - 1)
        right = torch.where(action == 1, 0, torch.where(action == 3, 1, right))
        px, py = sx.to(i8), sy.to(i8)
        # Friendly bullets move; one on an enemy's cell shoots the first fish there, else the
        # first sub (the oldest of them).
        fa, fx, fy, fd = f.unbind(0)  # [2, B] each
        fx = fx + fd  # a dead slot's fields are 0
        fa = fa * (fx == fx.clamp(0, LAST))
        on = e[A] * (e[X] == fx.unsqueeze(1)) * (e[Y] == fy.unsqueeze(1)) * fa.unsqueeze(1)  # [2, 32, B]
        first = on * (e[G] + 1 + 64 * (1 - e[S]))
        e[A] = e[A] - (on * (first == first.amax(1, keepdim=True))).amax(0)
        hit = on.amax(1)  # [2, B]
        fa, reward = fa - hit, hit.sum(0)
        # Divers, newest (slot 1) first: picked up on the sub's cell, before or after their move
        # (one on the cell that is not picked up moves off it), while fewer than six are aboard.
        alive, x, y, heading, timer = d  # [2, B] each
        meet = alive * (x == px) * (y == py)
        move = alive * (timer == 0)  # unless picked up first: it is gone then, whatever it did
        timer = timer - alive + move * (DIVER_MOVE_INTERVAL + 1)
        x = x + move * heading
        inside = (x == x.clamp(0, LAST)).to(i8)
        meet = meet | move * inside * (x == px) * (y == py)
        newer = (meet[1] == 1) & (divers < 6)
        pick = torch.stack(((meet[0] == 1) & (divers + newer.long() < 6), newer)).to(i8)
        divers = divers + pick.sum(0)
        d = torch.stack((alive * inside * (1 - pick), x, y, heading, timer))  # [5, 2, B]
        shift = (d[0, 0] == 0) & (d[0, 1] == 1)  # keep the older diver in slot 0
        d = torch.stack((torch.where(shift, d[:, 1], d[:, 0]), d[:, 1] * ~shift), 1)
        # Enemy subs, bullets and fish move on their timers (subs first in the package, but only
        # who takes a bullet depends on that: subs before fish, the newest first); touching the
        # sub ends the game.
        on_row = e[Y] == py
        hit = (e[A] * (e[X] == px) * on_row).amax(0)
        move = e[A] * (1 - e[T].clamp(max=1))
        e[T] = e[T] - e[A] + move * (speed8 + 1)
        e[X] = e[X] + move * e[D]
        inside = move * (e[X] == e[X].clamp(0, LAST))
        meet = inside * (e[X] == px) * on_row
        hit = hit | meet.amax(0)
        on = (inside - meet) * (e[X] == fx.unsqueeze(1)) * (e[Y] == fy.unsqueeze(1)) * fa.unsqueeze(1)
        newest = on * (64 * e[S] + 64 - e[G])
        gone = move - inside + (on * (newest == newest.amax(1, keepdim=True))).amax(0)
        taken = on.amax(1)
        fa, reward = fa - taken, reward + taken.sum(0)
        subs = e[A] * e[S]
        fires = subs * (1 - e[H].clamp(max=1))  # even a sub shot or gone this step fires
        e[H] = e[H] - subs + fires * (ENEMY_SHOT_INTERVAL + 1)
        fires = fires * (e[X] == e[X].clamp(0, LAST))  # a bullet off the grid is gone at once
        e[BA], e[BX], e[BY], e[BD] = e[BA] + fires, e[BX] + fires * e[X], e[BY] + fires * e[Y], e[BD] + fires * e[D]
        e[A] = e[A] - gone
        on_row = e[BY] == py
        hit = hit | (e[BA] * (e[BX] == px) * on_row).amax(0)
        e[BX] = e[BX] + e[BD]
        e[BA] = e[BA] * (e[BX] == e[BX].clamp(0, LAST))
        terminated = (hit | (e[BA] * (e[BX] == px) * on_row).amax(0)) == 1
        # Timers; oxygen; surfacing.
        e_timer, d_timer, shot = ((t - 1).clamp(min=0) for t in (e_timer, d_timer, shot))
        terminated = terminated | (oxygen <= 0)
        below = sy > 0
        oxygen = oxygen - below.long()
        arrive = ~below & (surface == 0)
        surface = torch.where(below, 0, surface)
        terminated = terminated | (arrive & (divers == 0))
        rescue = arrive & (divers != 0)  # _surface()
        full = rescue & (divers == 6)
        reward = reward + torch.where(full, oxygen * 10 // sq.MAX_OXYGEN, 0)
        divers = torch.where(full, 0, divers) - rescue.long()
        oxygen = torch.where(rescue, sq.MAX_OXYGEN, oxygen)
        surface = torch.where(rescue, 1, surface)
        if self.ramping:
            ramps = rescue & ((e_speed > 1) | (speed > 2))
            speed = speed - (ramps & (speed > 2) & (ramp % 2 == 1)).long()
            e_speed = e_speed - (ramps & (e_speed > 1)).long()
            ramp = ramp + ramps.long()
        counters = torch.stack((sx, sy, right, oxygen, divers, e_speed, e_timer, d_timer, speed, ramp, shot, surface))
        enemies, bullets = torch.stack(e), torch.stack((fa, fx, fy, fd))
        for slots in (enemies[:BA], enemies[BA:], bullets, d):
            slots[1:] *= slots[0]  # dead slots: 0
        return SeaquestState(counters, enemies, bullets, d), reward.float(), terminated
