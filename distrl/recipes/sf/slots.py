"""Sample Factory's shared memory: trajectory slots, the slot pool that says who may write each
one, and the parameter buffer inference reads.

Layout (:func:`rollout_layout`), allocated once by the learner and mapped by every process:

- ``traj``: ``[S, B, T]`` trajectory slots in the IMPALA layout (``observation [S, B, T, F]``,
  ``action`` (int64 ``[S, B, T]`` discrete, float32 ``[S, B, T, A]`` continuous),
  ``action_log_prob``, ``policy_version``, ``("next", observation/reward/done/
  terminated/truncated/episode_return)``; ``episode_return`` counts where ``done``). A rollout
  worker owns a slot while it fills it: it writes ``observation[s, :, t]``, inference writes
  ``action/action_log_prob/policy_version[s, :, t]`` (only while the worker waits for that step's
  reply), the worker writes the step's outcome.
  After ``T`` steps the worker hands the slot in, the learner copies it out and frees it.
- ``evicted``: ``[W]``, set by the learner for a rank it declared lost, before its slots are
  retired: a worker that was only stopped and comes back reads it before its next write and exits.
- ``params``: ``[P]`` float32, the learner's flattened parameters; ``control``: int64
  ``[stop, param_seq, param_version]``. ``param_seq`` is a seqlock: odd while the learner writes.

Who may touch a slot is the :class:`SlotPool`'s state, kept by the learner only; the doorbells
carry slot numbers, never data.

Ownership, and why a worker never writes a slot that is not its own (no lock on the hot path):

- A worker's first slots (a slot and a spare per group) are reserved for it when the pool is made
  (:meth:`SlotPool.reserve`), not taken at its ``attached``: a worker that attaches late, after
  the others have taken every free slot as spares, still gets its own, never -1. Every slot number
  a worker uses is checked (``0 <= s < S``) before it indexes with it: a -1 would write the last
  slot, another worker's.
- A slot stops being a worker's in two ways only: the worker hands it in (and never writes it
  again), or the learner declares the worker lost. Then its slots are *retired*
  (``reclaim(rank, reuse=False)``): never handed to anyone again. The worker checks its ``evicted``
  flag (one numpy int compare) before each write and before a hand-in, and exits at the first
  that finds it set; a worker stopped (SIGSTOP) between that check and its write and continued
  later writes once more, but only into a retired slot, which no one reads. Checking alone (a
  generation per slot, reused slots) would leave that window open onto another worker's rows,
  and closing it needs a lock per write; retiring costs the lost worker's slots, which nobody
  else needs (the pool is sized per worker, and a lost worker does not come back).
- The learner reads a slot only when it is handed in, and refuses (drops, counts in
  ``hand_ins_refused``) a hand-in from a rank it evicted: that slot is retired, its rows may be
  partly stale. Inference's late writes for an evicted worker land in retired slots too.
"""

from __future__ import annotations

import threading
from typing import Optional

import torch
from tensordict import TensorDict

from distrl.data import keys

STOP, PARAM_SEQ, PARAM_VERSION = 0, 1, 2  # indices into control


def rollout_layout(
    num_slots: int,
    envs_per_slot: int,
    unroll_length: int,
    obs_shape: int | tuple[int, ...],
    num_params: int,
    world_size: int = 1,
    obs_dtype: torch.dtype = torch.float32,
    action_shape: tuple[int, ...] = (),
    action_dtype: torch.dtype = torch.int64,
) -> TensorDict:
    """Zeros of the shared layout above: ``traj [S, B, T]``, ``params [P]``, ``control [3]``,
    ``evicted [W]`` (1 for a rank whose slots were reclaimed: it must not write any more).
    Observations are ``[*obs_shape]`` of ``obs_dtype`` (an image stays uint8/bool: a quarter or less
    of float32's bytes in every slot); an int ``F`` means ``(F,)``. Actions are
    ``[*action_shape]`` of ``action_dtype``: the head's (:mod:`distrl.nn.heads`), int64 ``()`` for
    discrete actions, float32 ``(A,)`` for a Gaussian's."""
    S, B, T = num_slots, envs_per_slot, unroll_length
    F = (obs_shape,) if isinstance(obs_shape, int) else tuple(obs_shape)
    z = lambda *shape, dtype=torch.float32: torch.zeros(S, B, T, *shape, dtype=dtype)  # noqa: E731
    traj = TensorDict(
        {
            keys.OBSERVATION: z(*F, dtype=obs_dtype),
            keys.ACTION: z(*action_shape, dtype=action_dtype),
            keys.ACTION_LOG_PROB: z(),
            keys.POLICY_VERSION: z(dtype=torch.int64),
            keys.NEXT: TensorDict(
                {
                    keys.OBSERVATION: z(*F, dtype=obs_dtype),
                    keys.STEP_REWARD: z(1),
                    keys.STEP_DONE: z(1, dtype=torch.bool),
                    keys.STEP_TERMINATED: z(1, dtype=torch.bool),
                    keys.STEP_TRUNCATED: z(1, dtype=torch.bool),
                    keys.EPISODE_RETURN: z(1),
                },
                batch_size=[S, B, T],
            ),
        },
        batch_size=[S, B, T],
    )
    return TensorDict(
        {
            keys.TRAJ: traj,
            keys.PARAMS: torch.zeros(num_params),
            keys.CONTROL: torch.zeros(3, dtype=torch.int64),
            keys.EVICTED: torch.zeros(world_size, dtype=torch.int64),
        }
    )


def publish_params(shared: TensorDict, flat: torch.Tensor, version: int) -> None:
    """Learner side: write ``flat [P]`` and its version under the seqlock."""
    control = shared[keys.CONTROL]
    control[PARAM_SEQ] += 1  # odd: a write is in progress
    shared[keys.PARAMS].copy_(flat)
    control[PARAM_VERSION] = version
    control[PARAM_SEQ] += 1


def read_params(shared: TensorDict, last_seq: int, out: torch.Tensor) -> Optional[tuple[int, int]]:
    """Inference side: copy the parameters into ``out [P]`` if they changed since ``last_seq``.

    Returns ``(seq, version)`` of the copy, or ``None`` when nothing newer is there (or a write
    is in progress: the next batch tries again; a torn copy is never returned)."""
    control = shared[keys.CONTROL]
    seq = int(control[PARAM_SEQ])
    if seq == last_seq or seq % 2:
        return None
    out.copy_(shared[keys.PARAMS])
    version = int(control[PARAM_VERSION])
    return (seq, version) if int(control[PARAM_SEQ]) == seq else None


class SlotError(RuntimeError):
    """A slot was handed in or freed by a role that does not own it (a protocol bug)."""


class SlotPool:
    """Ownership of ``num_slots`` trajectory slots: free, a worker's (by rank), the learner's, or
    retired (taken from a lost worker, never handed out again: see the module docstring).

    Thread-safe (transport handlers and the learner loop both use it). A lost worker's slots are
    taken back with :meth:`reclaim`, so a killed worker costs its partial slots only.
    """

    FREE, LEARNER, RETIRED = -1, -2, -3

    def __init__(self, num_slots: int):
        self.owner = [self.FREE] * num_slots
        self._lock = threading.Lock()
        self.reclaimed = 0  #: slots taken back from lost workers
        self.refused = 0  #: acquire calls that found no free slot (backpressure from the learner)

    def reserve(self, rank: int, n: int) -> list[int]:
        """``n`` free slots now owned by ``rank`` (its first ones); raises ``SlotError`` if fewer are free."""
        with self._lock:
            free = [s for s, owner in enumerate(self.owner) if owner == self.FREE][:n]
            if len(free) < n:
                raise SlotError(f"{n} slots to reserve for rank {rank}, {len(free)} free")
            for s in free:
                self.owner[s] = rank
            return free

    def free_count(self) -> int:
        with self._lock:
            return self.owner.count(self.FREE)

    def acquire(self, rank: int) -> int:
        """A free slot now owned by ``rank``, or -1 when none is free."""
        with self._lock:
            for s, owner in enumerate(self.owner):
                if owner == self.FREE:
                    self.owner[s] = rank
                    return s
            self.refused += 1
            return -1

    def hand_in(self, rank: int, slot: int) -> None:
        """``rank`` is done writing ``slot``: from now on only the learner reads it."""
        with self._lock:
            if not 0 <= slot < len(self.owner) or self.owner[slot] != rank:
                raise SlotError(f"rank {rank} handed in slot {slot}, owned by {self._name(slot)}")
            self.owner[slot] = self.LEARNER

    def release(self, slot: int) -> None:
        """The learner has copied ``slot`` out: it is free again."""
        with self._lock:
            if self.owner[slot] != self.LEARNER:
                raise SlotError(f"the learner released slot {slot}, owned by {self._name(slot)}")
            self.owner[slot] = self.FREE

    def reclaim(self, rank: int, reuse: bool = True) -> list[int]:
        """Take back every slot ``rank`` owns (it was lost); returns them. ``reuse=False`` retires
        them instead of freeing them: a lost worker may only be stopped, and write them again."""
        with self._lock:
            slots = [s for s, owner in enumerate(self.owner) if owner == rank]
            for s in slots:
                self.owner[s] = self.FREE if reuse else self.RETIRED
            self.reclaimed += len(slots)
            return slots

    def _name(self, slot: int) -> str:
        if not 0 <= slot < len(self.owner):
            return "nobody (no such slot)"
        o = self.owner[slot]
        return {self.FREE: "nobody", self.LEARNER: "the learner", self.RETIRED: "nobody (retired)"}.get(o, f"rank {o}")
