"""Frame stacks stored and sent once per frame: a lossless codec for ``[N, K, *F]`` stacks.

An Atari observation is a stack of the last ``K = 4`` frames, newest last (``EnvInfo.frame_stack``).
Along an episode stack ``i`` holds stack ``i - 1``'s ``K - 1`` newer frames plus one new frame, so
shipping or storing whole stacks repeats each 84x84 frame (7,056 bytes) ``K`` times.
:func:`pack_stacks` keeps each frame once:

- ``frames [M, *F]``: the distinct frames, in the order they first appear;
- ``index [N, K]`` int32: ``frames[index] == obs`` exactly (:func:`unpack_stacks`).

Row ``i`` *chains* to row ``prev[i]`` (by default the row before it) when its older ``K - 1`` frames
equal that row's newer ``K - 1`` (it adds only its newest frame), or when it equals that row (it
adds none: a bootstrap stack that is the next step's observation). Both are checked here frame for
frame, so correctness never depends on the env: a reset, a zero-padded first stack or a foreign row
simply does not chain and stores its whole stack. ``prev`` is what lets callers chain a bootstrap
stack to the step before it, a truncated episode's final stack to its last step, or the first step
of a message to the stacks its receiver already holds (``distrl/data/compact.py``,
``distrl/data/transitions.py``).
"""

from __future__ import annotations

from typing import Optional

import torch


def chained_rows(obs: torch.Tensor, prev: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(same [N], shifted [N])`` bool for ``obs [N, K, *F]`` and ``prev [N]`` int64 (``-1``: no row
    to chain to): row ``i`` equals row ``prev[i]`` (``same``), or else holds its ``K - 1`` newer
    frames as its older ones (``shifted``)."""
    same, shifted = torch.zeros(obs.shape[0], dtype=torch.bool), torch.zeros(obs.shape[0], dtype=torch.bool)
    rows = (prev >= 0).nonzero().squeeze(1)
    if rows.numel():
        mine, theirs = obs[rows], obs[prev[rows]]  # [R, K, *F]
        same[rows] = (mine == theirs).reshape(rows.shape[0], -1).all(1)
        shifted[rows] = (mine[:, :-1] == theirs[:, 1:]).reshape(rows.shape[0], -1).all(1) & ~same[rows]
    return same, shifted


def pack_stacks(obs: torch.Tensor, prev: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(frames [M, *F], index [N, K] int32)`` with ``frames[index] == obs`` for ``obs [N, K, *F]``.

    Args:
        obs: ``N`` stacks of ``K`` frames, oldest first.
        prev: ``[N]`` int64, the row each row may chain to (``-1``: none; must be acyclic, e.g.
            earlier rows). Default: ``i - 1`` (row 0 none), a time-ordered sequence of one env.

    A row equal to its ``prev`` row stores nothing; one that holds its ``prev`` row's newer frames
    as its older ones stores its newest frame; any other row stores all ``K``. Stored frames are
    numbered in row order, oldest first (a first row that chains to nothing owns ``frames[:K]``)."""
    N, K = obs.shape[:2]
    prev = torch.arange(-1, N - 1) if prev is None else prev.to(torch.int64)
    if prev.shape != (N,) or (N and not -1 <= int(prev.min()) <= int(prev.max()) < N):
        raise ValueError(f"prev {tuple(prev.shape)} must be [N={N}] row numbers or -1")
    same, shifted = chained_rows(obs, prev)
    own = torch.ones(N, K, dtype=torch.bool)
    own[shifted, :-1] = False
    own[same] = False
    # every frame slot (i, k) points at the slot it copies: itself when stored, (prev, k + 1) when
    # shifted, (prev, k) when the same; pointer jumping follows every chain in log2(length) passes
    ptr = torch.arange(N * K).view(N, K)
    ptr[shifted, :-1] = (prev[shifted] * K)[:, None] + torch.arange(1, K)
    ptr[same] = (prev[same] * K)[:, None] + torch.arange(K)
    ptr = ptr.reshape(-1)
    for _ in range(max(N * K, 1).bit_length() + 1):
        nxt = ptr[ptr]
        if torch.equal(nxt, ptr):
            break
        ptr = nxt
    else:
        raise ValueError("prev has a cycle: some frames point to no stored frame")
    number = torch.full((N * K,), -1, dtype=torch.int64)
    number[own.reshape(-1)] = torch.arange(int(own.sum()))
    index = number[ptr].view(N, K)
    if N and int(index.min()) < 0:
        raise ValueError("prev has a cycle: some frames point to no stored frame")
    return obs[own], index.to(torch.int32)


def unpack_stacks(frames: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``obs [N, K, *F]`` from :func:`pack_stacks`' ``frames [M, *F]`` and ``index [N, K]``. Raises
    ``ValueError`` when the index is not int32 ``[N, K]`` into ``frames`` (a broken sender)."""
    check_index(index, frames.shape[0])
    return frames[index.long()]


def check_index(index: torch.Tensor, num_frames: int) -> None:
    """``ValueError`` unless ``index`` is a ``[N, K]`` int32 tensor of values in ``[0, num_frames)``."""
    if (
        index.dim() != 2
        or index.dtype != torch.int32
        or (index.numel() and not 0 <= int(index.min()) <= int(index.max()) < num_frames)
    ):
        raise ValueError(f"frame index {tuple(index.shape)} {index.dtype} must be [N, K] int32 in [0, {num_frames})")


def sequence_prev(B: int, T: int, first: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``prev [B * T]`` for ``B`` time-ordered sequences of ``T`` rows, flattened batch-major: each
    row chains to the row before it in its own sequence; row ``t = 0`` of sequence ``b`` to
    ``first[b]`` (``[B]`` int64, default ``-1``: none)."""
    prev = torch.arange(B * T).view(B, T) - 1
    prev[:, 0] = -1 if first is None else first
    return prev.reshape(-1)


def gather_stacks(frames: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """``[*I, *F]`` stacks of ``frames [M, *F]`` at ``ids [*I]`` (int64; ``-1``: a zero frame)."""
    out = frames[ids.clamp_min(0).to(frames.device)]
    out[ids < 0] = 0
    return out
