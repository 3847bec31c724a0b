"""A replay store that keeps each frame of frame-stack observations once (Atari: 7,056 bytes an
84x84 frame, where whole ``[4, 84, 84]`` stacks for the observation and the bootstrap observation
would cost 56 KB a transition).

Beside the transition storage of :class:`~distrl.replay.store.ReplayStore` sits a *frame ring*
``[frame_capacity, *F]``. An insert brings ``frames [M, *F]`` and transitions whose ``obs_frames``
and ``next_frames [K]`` index them (``-1``: no stack, zeros when sampled: the bootstrap observation
of a terminated episode, never read); the frames go into the ring under global ids (the count of
frames written before them), the transitions hold those ids (int64), and :meth:`sample` gathers
the stacks back into ``observation`` and ``("next", "observation")``.

FIFO both ways: the ring overwrites its oldest frames, the storage its oldest transitions. A frame
equal to one written lately is not written again (found by hash, confirmed frame for frame): the
steps an Ape-X actor's next window carries over, the first stack of each env in a message, a
reset's zero frames. So about one frame a transition comes in, and the ring is sized with a little
room (``frame_room`` frames per transition of capacity). Should frames come faster than that
(short episodes, short unrolls), a transition whose oldest frame has been overwritten is *dead*:
its priority is 0, so it is never sampled, a priority update for it is dropped, and it is not
counted in ``len``; the writer replaces it in its turn. So a sample never returns a wrong frame.
"""

from __future__ import annotations

import collections
from typing import Optional

import torch
from tensordict import TensorDictBase

from distrl.data import keys
from distrl.data.frames import gather_stacks
from distrl.data.keys import NEXT_FRAMES, OBS_FRAMES
from distrl.replay.store import ReplayStore, layout_of

#: where :meth:`FrameReplayStore.sample` puts the stacks they index
STACK_OF = {OBS_FRAMES: keys.OBSERVATION, NEXT_FRAMES: keys.NEXT_OBSERVATION}


class FrameReplayStore(ReplayStore):
    """:class:`ReplayStore` of transitions whose observations are frame stacks (module docstring).

    Args:
        capacity, batch_size, device: as :class:`ReplayStore`; sampler: a prioritized one
            (:class:`~distrl.replay.sum_tree.SumTreeSampler`).
        frame_room: frames the ring keeps per transition of capacity (``>= 1``).
    """

    def __init__(
        self,
        capacity: int,
        batch_size: Optional[int] = None,
        device: torch.device | str = "cpu",
        sampler=None,
        frame_room: float = 1.05,
        generator: Optional[torch.Generator] = None,
    ):
        super().__init__(capacity, batch_size, device, sampler, generator)
        if frame_room < 1 or sampler is None:
            raise ValueError(
                f"a frame store needs frame_room >= 1 (got {frame_room}) and a prioritized sampler "
                "(its dead transitions get priority 0)"
            )
        self.frame_capacity = int(capacity * frame_room)
        self.frames: Optional[torch.Tensor] = None  # [frame_capacity, *F], allocated by the first insert
        self.written = 0  # frames written over the run: the next frame's global id
        self.oldest = torch.zeros(capacity, dtype=torch.int64)  # per slot: the oldest frame id it reads
        self.dead = torch.zeros(capacity, dtype=torch.bool)  # per slot: a frame it reads is overwritten
        self.device = device
        #: how far back a new frame is looked for among those written (hash -> id, oldest first): about
        #: the ring's room, so that a reference back does not outlive the ring (at least a few messages)
        self.recent_frames = min(max(self.frame_capacity - capacity, 1024), 1 << 16)
        self._recent: dict[int, int] = {}
        self._recent_order: collections.deque[tuple[int, int]] = collections.deque()

    def __len__(self) -> int:
        return len(self.buffer) - int(self.dead.sum())

    def extend(
        self, batch: TensorDictBase, priority: Optional[torch.Tensor] = None, frames: Optional[torch.Tensor] = None
    ) -> bool:
        """Append ``frames [M, *F]`` to the ring and ``batch [N]`` (with ``obs_frames``,
        ``next_frames [N, K]`` int64 indices into ``frames``, ``-1`` for none) to the storage;
        ``False`` (counted) for a wrong layout, indices out of range or more frames than the ring."""
        if (
            frames is None
            or batch.batch_dims != 1
            or not all(k in batch.keys() for k in STACK_OF)
            or (
                self.frames is not None
                and (frames.shape[1:] != self.frames.shape[1:] or frames.dtype != self.frames.dtype)
            )
            or frames.shape[0] > self.frame_capacity
        ):
            self.rejected += 1
            return False
        index = torch.stack([batch[k] for k in STACK_OF])
        if index.dtype != torch.int64 or (
            index.numel() and not -1 <= int(index.min()) <= int(index.max()) < frames.shape[0]
        ):
            self.rejected += 1
            return False
        layout = layout_of(batch)
        if (self.layout is not None and layout != self.layout) or (
            priority is not None and priority.shape != batch.shape
        ):
            self.rejected += 1
            return False
        if self.frames is None:
            self.frames = torch.zeros(self.frame_capacity, *frames.shape[1:], dtype=frames.dtype, device=self.device)
        place = self._place(frames)
        ids = torch.where(index >= 0, place[index.clamp_min(0)], index)  # global ids; -1 stays
        batch = batch.clone(recurse=False)
        for k, v in zip(STACK_OF, ids):
            batch[k] = v
        self.layout = layout
        slot = torch.as_tensor(self.buffer.extend(batch)).reshape(-1)
        read = torch.where(ids >= 0, ids, torch.iinfo(torch.int64).max)  # [2, N, K]
        self.oldest[slot] = read.transpose(0, 1).reshape(slot.shape[0], -1).amin(1)
        self.dead[slot] = False
        if priority is not None:
            self.sampler.update_priority(slot, priority)
        self.inserted += batch.shape[0]
        self._evict()
        return True

    def _place(self, frames: torch.Tensor) -> torch.Tensor:
        """Global ids ``[M]`` of ``frames [M, *F]``: a frame equal to one written lately (the steps an
        actor's next window carries over, a reset's zero frames) takes that one's id; the others are
        written to the ring. Found by hash, confirmed frame for frame: lossless whatever comes."""
        cpu = frames.cpu()
        arr = cpu.numpy()
        ids, new = torch.empty(frames.shape[0], dtype=torch.int64), []
        low = self.written - self.frame_capacity
        for j in range(frames.shape[0]):
            h = hash(arr[j].tobytes())
            i = self._recent.get(h)
            if i is not None and i >= low:
                seen = cpu[new[i - self.written]] if i >= self.written else self.frames[i % self.frame_capacity]
                if torch.equal(seen.cpu(), cpu[j]):
                    ids[j] = i
                    continue
            ids[j] = i = self.written + len(new)
            new.append(j)
            self._recent[h] = i
            self._recent_order.append((i, h))
        slots = (self.written + torch.arange(len(new))) % self.frame_capacity
        self.frames[slots] = frames[new].to(self.frames.device)
        self.written += len(new)
        while self._recent_order and self._recent_order[0][0] < self.written - self.recent_frames:
            i, h = self._recent_order.popleft()
            if self._recent.get(h) == i:
                del self._recent[h]
        return ids

    def _evict(self) -> None:
        """Kill the transitions that read a frame the ring has overwritten (module docstring)."""
        size = len(self.buffer)
        gone = (self.oldest[:size] < self.written - self.frame_capacity) & ~self.dead[:size]
        slot = gone.nonzero().squeeze(1)
        if slot.numel():
            self.dead[slot] = True
            tree = self.sampler.tree
            tree.sums[0][slot] = 0
            tree.rebuild()  # its min tree skips zero leaves (rare: only a ring too small for the stream)

    def update_priority(self, index: torch.Tensor, generation: torch.Tensor, priority: torch.Tensor) -> int:
        """As :meth:`ReplayStore.update_priority`; a dead transition stays at priority 0."""
        keep = (self.writer.generations_of(index) == generation) & ~self.dead[index]
        self.sampler.update_priority(index[keep], priority[keep])
        return int(keep.sum())

    def sample(self, batch_size: Optional[int] = None) -> TensorDictBase:
        """``[batch_size]`` transitions with their stacks gathered: ``observation`` and ``("next",
        "observation")`` ``[batch_size, K, *F]`` in place of the frame ids (zeros for ``-1``)."""
        if len(self) == 0:
            raise RuntimeError("sample() on an empty replay")
        batch = self.buffer.sample(batch_size)
        out = batch.exclude(*STACK_OF)
        for k, name in STACK_OF.items():
            ids = batch[k]
            out[name] = gather_stacks(self.frames, torch.where(ids >= 0, ids % self.frame_capacity, ids))
        return out

    def nbytes(self) -> int:
        """Bytes of every tensor the store holds: the ring, the transitions, the per-slot bookkeeping
        and the sampler's tree."""
        ring = 0 if self.frames is None else self.frames.numel() * self.frames.element_size()
        return ring + super().nbytes() + self.oldest.numel() * 8 + self.dead.numel()

    def state_dict(self) -> dict:
        return super().state_dict() | {
            "frame_ring": self.frames,
            "written": self.written,
            "oldest": self.oldest.clone(),
            "dead": self.dead.clone(),
            "frame_capacity": self.frame_capacity,
        }

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.frames, self.written, self.frame_capacity = state["frame_ring"], state["written"], state["frame_capacity"]
        self.oldest, self.dead = state["oldest"].clone(), state["dead"].clone()
        self._recent.clear()  # frames are looked for again from the next insert on
        self._recent_order.clear()
