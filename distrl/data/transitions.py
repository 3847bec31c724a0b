"""The wire form of an Ape-X actor's insert: each observation crosses once.

An actor cuts every unroll window ``[B, W]`` (the last ``n - 1`` steps of the unroll before, then
``T`` new ones; ``W = T + n - 1``) into ``T' = W - n + 1`` n-step transitions per env. Stored, each
transition holds its observation and its bootstrap observation, so shipped as stored a MinAtar
step would cost two 400-byte images. :func:`pack_transitions` sends instead:

- the window's observations ``[B, W]`` once, and the one after its last step ``[B]``: within an
  episode, step ``t``'s next observation is step ``t + 1``'s;
- the true final observation of each episode *truncated* at a step ``t < W - 1`` (its next
  observation is not ``t + 1``'s, and the target bootstraps from it), at flat index ``b W + t``;
- per transition, what the window cannot give back: the action (``uint8`` when it fits),
  ``nstep_return``, ``bootstrap_discount``, the priority and ``bootstrap_offset = last - t``
  (``uint8``), where ``last`` is the step whose next observation the target bootstraps from
  (:func:`distrl.algorithms.estimators.nstep_returns`); and ``policy_version`` once for the message.

An episode that *terminated* sends no final observation: its transitions bootstrap with discount 0,
so the target never reads it, and :func:`unpack_transitions` stores zeros there. Untrained
MinAtar Breakout ends an episode every 7 to 16 steps: sent, those frames would cost 25 to 60 bytes
a step. Everything else :func:`unpack_transitions` (the replay shard runs it) gives back as the
actor would have sent it whole, leaf for leaf, dtypes included. (``distrl.data.compact``, IMPALA's
form, keeps every final observation and the end flags, which a V-trace learner reads.)

Frame stacks (``frames=True``: ``EnvInfo.frame_stack > 0``, Atari) cross once per *frame*: the
stacks of the window, the one after it and the finals, in that order, become ``frames [M, *F]``
and ``stacks [B W + B + Q, K]`` int32 (:mod:`distrl.data.frames`), about ``1 + (n + K - 1) / T``
frames per transition (the first stack of each env whole, the carried steps again). The shard
keeps them so (:func:`unpack_frame_transitions`, :class:`distrl.replay.frame_store.FrameReplayStore`).
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from distrl.data import keys
from distrl.data.frames import check_index, pack_stacks, sequence_prev
from distrl.data.frames import gather_stacks
from distrl.data.keys import NEXT_FRAMES, OBS_FRAMES

#: the observation after the window's last step; truncated episodes' final observations and their
#: flat indices; each transition's offset ``last - t`` to its bootstrap step
AFTER, FINAL, FINAL_INDEX, OFFSET = "after", "final", "final_index", "bootstrap_offset"
#: the frame-stack form: distinct frames, and the ``[K]`` indices of each stack into them
FRAMES, STACKS = "stack_frames", "stacks"


def pack_transitions(
    window: TensorDict,
    nstep_return: torch.Tensor,
    discount: torch.Tensor,
    last: torch.Tensor,
    priority: torch.Tensor,
    version: int,
    frames: bool = False,
) -> TensorDict:
    """The insert message for the transitions starting at the first ``T'`` steps of ``window``.

    Args:
        window: ``[B, W]`` steps with ``observation [B, W, *F]``, ``action [B, W]`` and ``("next",
            observation/terminated/truncated)``; ``observation[:, t + 1]`` must be step ``t``'s next
            observation wherever the episode went on (as an env runner steps them).
        nstep_return, discount, last: ``[B, T']`` from :func:`~distrl.algorithms.estimators.nstep_returns`.
        priority: ``[B * T']`` initial raw priorities, in the transitions' flat order.
        version: the policy version that acted.
        frames: observations ``[B, W, K, *F]`` are stacks of ``K`` frames: send each frame once.

    Raises ``ValueError`` if the observations do not chain (the shard would rebuild wrong ones).
    """
    nxt = window[keys.NEXT]
    obs, next_obs = window[keys.OBSERVATION], nxt[keys.OBSERVATION]
    terminated, truncated = nxt[keys.STEP_TERMINATED][..., 0], nxt[keys.STEP_TRUNCATED][..., 0]  # [B, W]
    went_on = ~(terminated | truncated)[:, :-1]
    if not bool((next_obs[:, :-1][went_on] == obs[:, 1:][went_on]).all()):
        raise ValueError(
            "the window's observations do not chain: observation[t + 1] != next observation[t] within an episode"
        )
    B, W = window.batch_size
    Tp = nstep_return.shape[1]
    offset = last - torch.arange(Tp)
    if offset.numel() and not 0 <= int(offset.min()) <= int(offset.max()) <= 255:
        raise ValueError(f"bootstrap offsets must be in [0, 255], got [{int(offset.min())}, {int(offset.max())}]")
    action = window[keys.ACTION][:, :Tp]
    if action.dtype == torch.int64 and action.numel() and 0 <= int(action.min()) and int(action.max()) <= 255:
        action = action.to(torch.uint8)
    b, t = (truncated & ~terminated)[:, :-1].nonzero(as_tuple=True)
    final_index = b * W + t
    final = next_obs.reshape(B * W, *next_obs.shape[2:])[final_index]
    if frames:
        prev = torch.cat([sequence_prev(B, W), torch.arange(B) * W + W - 1, final_index])
        table, stacks = pack_stacks(torch.cat([obs.flatten(0, 1), next_obs[:, -1], final]), prev)
        observations = {FRAMES: table, STACKS: stacks}
    else:
        observations = {keys.OBSERVATION: obs, AFTER: next_obs[:, -1], FINAL: final}
    return TensorDict(
        {
            **observations,
            FINAL_INDEX: final_index,
            keys.ACTION: action,
            keys.NSTEP_RETURN: nstep_return,
            keys.BOOTSTRAP_DISCOUNT: discount,
            OFFSET: offset.to(torch.uint8),
            keys.POLICY_VERSION: torch.tensor(version, dtype=torch.int64),
            keys.PRIORITY: priority.reshape(-1),
        }
    ).clone()  # every leaf its own storage: no view drags its base over the wire


def is_packed(msg: TensorDict) -> bool:
    """Whether an insert message is :func:`pack_transitions`' form (else transitions as stored)."""
    return AFTER in msg.keys() or FRAMES in msg.keys()


def is_frames(msg: TensorDict) -> bool:
    """Whether a packed insert is the frame-stack form (:func:`unpack_frame_transitions`)."""
    return FRAMES in msg.keys()


def packed_count(msg: TensorDict) -> int:
    """Transitions in a packed insert (without unpacking it)."""
    return msg[keys.PRIORITY].shape[0]


def unpack_transitions(msg: TensorDict) -> tuple[TensorDict, torch.Tensor]:
    """``(transitions [N], priority [N])`` from :func:`pack_transitions`' message: ``observation``,
    ``action`` (int64), ``("next", "observation")`` (the bootstrap observation; zeros where
    ``bootstrap_discount`` is 0), ``nstep_return``, ``bootstrap_discount`` and ``policy_version``
    (int64), with ``N = B * T'``. Raises ``ValueError`` when the parts do not fit together."""
    if is_frames(msg):
        frames, out, priority = unpack_frame_transitions(msg)
        stacks = {k: gather_stacks(frames, out[k]) for k in (OBS_FRAMES, NEXT_FRAMES)}
        out = out.exclude(OBS_FRAMES, NEXT_FRAMES)
        out[keys.OBSERVATION], out[keys.NEXT_OBSERVATION] = stacks[OBS_FRAMES], stacks[NEXT_FRAMES]
        return out.select(
            keys.OBSERVATION,
            keys.ACTION,
            keys.NEXT_OBSERVATION,
            keys.NSTEP_RETURN,
            keys.BOOTSTRAP_DISCOUNT,
            keys.POLICY_VERSION,
        ), priority
    obs, after, final, final_index = msg[keys.OBSERVATION], msg[AFTER], msg[FINAL], msg[FINAL_INDEX]
    if obs.dim() < 2 or after.shape != obs.shape[:1] + obs.shape[2:] or after.dtype != obs.dtype:
        raise ValueError(
            f"the observation after the window {tuple(after.shape)} {after.dtype} does not fit its "
            f"observations {tuple(obs.shape)} {obs.dtype}"
        )
    B, W = obs.shape[:2]
    if (
        final.shape[1:] != obs.shape[2:]
        or final.dtype != obs.dtype
        or final_index.shape != final.shape[:1]
        or final_index.dtype != torch.int64
        or (final_index.numel() and not 0 <= int(final_index.min()) <= int(final_index.max()) < B * W)
    ):
        raise ValueError(
            f"final observations {tuple(final.shape)} at {tuple(final_index.shape)} indices do not fit "
            f"observations {tuple(obs.shape)}"
        )
    last = _check_steps(msg, B, W)
    G, discount, action, priority = (
        msg[keys.NSTEP_RETURN],
        msg[keys.BOOTSTRAP_DISCOUNT],
        msg[keys.ACTION],
        msg[keys.PRIORITY],
    )
    Tp = G.shape[1]
    next_obs = torch.empty(obs.shape, dtype=obs.dtype)
    next_obs[:, :-1] = obs[:, 1:]
    next_obs[:, -1] = after
    next_obs.view(B * W, *obs.shape[2:])[final_index] = final
    bootstrap = next_obs[torch.arange(B)[:, None], last]  # [B, T', *F]
    bootstrap[discount == 0] = 0  # the episode terminated: never read, never sent
    out = TensorDict(
        {
            keys.OBSERVATION: obs[:, :Tp],
            keys.ACTION: action.long() if action.dtype == torch.uint8 else action,
            keys.NEXT: TensorDict({keys.OBSERVATION: bootstrap}, batch_size=G.shape),
            keys.NSTEP_RETURN: G,
            keys.BOOTSTRAP_DISCOUNT: discount,
            keys.POLICY_VERSION: msg[keys.POLICY_VERSION].to(torch.int64).expand(B, Tp),
        },
        batch_size=G.shape,
    ).reshape(-1)
    return out, priority


def _check_steps(msg: TensorDict, B: int, W: int) -> torch.Tensor:
    """``last [B, T']`` of a packed insert's per-transition parts; ``ValueError`` if they do not fit
    ``B`` envs of ``W`` steps."""
    G, discount, offset, action, priority = (
        msg[k] for k in (keys.NSTEP_RETURN, keys.BOOTSTRAP_DISCOUNT, OFFSET, keys.ACTION, keys.PRIORITY)
    )
    if (
        G.dim() != 2
        or G.shape[0] != B
        or G.shape[1] > W
        or any(x.shape[:2] != G.shape for x in (discount, offset, action))
        or offset.dtype != torch.uint8
    ):
        raise ValueError(
            f"returns {tuple(G.shape)}, discounts {tuple(discount.shape)}, offsets {tuple(offset.shape)} "
            f"{offset.dtype} and actions {tuple(action.shape)} must be [B, T'] (offsets uint8), T' <= {W}"
        )
    Tp = G.shape[1]
    last = torch.arange(Tp) + offset.long()
    if priority.shape != (B * Tp,) or (last.numel() and int(last.max()) >= W):
        raise ValueError(
            f"{tuple(priority.shape)} priorities and bootstrap steps up to "
            f"{int(last.max()) if last.numel() else 0} do not fit {B} x {Tp} transitions of {W} steps"
        )
    return last


def unpack_frame_transitions(msg: TensorDict) -> tuple[torch.Tensor, TensorDict, torch.Tensor]:
    """``(frames [M, *F], transitions [N], priority [N])`` from the frame-stack form, for a
    :class:`~distrl.replay.frame_store.FrameReplayStore`: the transitions of
    :func:`unpack_transitions` with ``obs_frames`` and ``next_frames [N, K]`` (int64 indices into
    ``frames``; ``-1`` where ``bootstrap_discount`` is 0) in place of the two observations."""
    frames, stacks, final_index = msg[FRAMES], msg[STACKS], msg[FINAL_INDEX]
    check_index(stacks, frames.shape[0])
    B, Q = msg[keys.NSTEP_RETURN].shape[0], final_index.shape[0]
    W = (stacks.shape[0] - B - Q) // max(B, 1)
    if (
        B < 1
        or W < 1
        or stacks.shape[0] != B * W + B + Q
        or final_index.dtype != torch.int64
        or (Q and not 0 <= int(final_index.min()) <= int(final_index.max()) < B * W)
    ):
        raise ValueError(
            f"{stacks.shape[0]} stacks do not fit {B} envs' windows, their next stacks and "
            f"{Q} finals at indices {tuple(final_index.shape)} {final_index.dtype}"
        )
    last = _check_steps(msg, B, W)
    index = stacks.long()
    window, after, final = index.split([B * W, B, Q])
    window = window.view(B, W, -1)
    nxt = torch.empty_like(window)
    nxt[:, :-1], nxt[:, -1] = window[:, 1:], after
    nxt.view(B * W, -1)[final_index] = final
    G, discount = msg[keys.NSTEP_RETURN], msg[keys.BOOTSTRAP_DISCOUNT]
    Tp = G.shape[1]
    bootstrap = nxt[torch.arange(B)[:, None], last]  # [B, T', K]
    bootstrap[discount == 0] = -1  # the episode terminated: never read
    action = msg[keys.ACTION]
    out = TensorDict(
        {
            OBS_FRAMES: window[:, :Tp],
            keys.ACTION: action.long() if action.dtype == torch.uint8 else action,
            NEXT_FRAMES: bootstrap,
            keys.NSTEP_RETURN: G,
            keys.BOOTSTRAP_DISCOUNT: discount,
            keys.POLICY_VERSION: msg[keys.POLICY_VERSION].to(torch.int64).expand(B, Tp),
        },
        batch_size=G.shape,
    ).reshape(-1)
    return frames, out, msg[keys.PRIORITY]
