"""The compact wire form of a ``[B, T]`` trajectory: each observation crosses the wire once.

An actor's trajectory (the TorchRL layout of :data:`distrl.data.keys.IMPALA_IN_KEYS`) holds every
observation twice: ``observation[b, t]`` and ``("next", "observation")[b, t - 1]`` are the same
frame unless an episode ended between them. For a 10x10 MinAtar image that doubles the bytes of
every step. :func:`pack_trajectory` keeps ``observation [B, T]`` and sends of the next observations
only what the observations do not already hold:

- ``bootstrap [B, *F]``: the observation after the last step (what V-trace bootstraps from);
- ``final [K, *F]`` and ``final_index [K]``: the true last observation of each of the ``K`` episodes
  *truncated* at a step ``t < T - 1`` (``observation[b, t + 1]`` is then the next episode's first),
  at flat index ``b * T + t``. After a termination nothing bootstraps (V-trace, GAE and n-step
  targets multiply the next value by ``1 - terminated``), so a terminated step's next observation
  is not sent: it arrives as the following step's observation. Sending it cost 400 bytes an
  episode on MinAtar, 37 a step while a near-random policy's episodes last 11 steps.

It also drops what the receiver can rebuild: ``("next", "done")`` (``terminated | truncated``), a
``policy_version`` that is one number for the whole message, and the width of discrete actions
(``uint8`` on the wire when every action fits, ``int64`` again after :func:`unpack_trajectory`);
continuous actions (a Gaussian's float32 ``[B, T, A]``) cross as they are: no narrower form is exact.
Neither TorchRL nor tensordict has this (a ``TensorDict`` is shipped as it is); SEED's workers
send observations once per step by construction (``recipes/seed/trajectory.py``).

Frame stacks (``frames=True``, for ``EnvInfo.frame_stack > 0``: Atari's ``[4, 84, 84]``): each
*frame* crosses once (:mod:`distrl.data.frames`). The stacks of ``observation``, ``bootstrap`` and
``final``, in that order, become ``frames [M, *F]`` and ``stacks [S, K]`` int32 (no pixel tensors).
With ``ref [B, K, *F]``, the previous message's bootstrap stacks, which the receiver holds (it
acknowledged them: the learner's reply), step 0 of each env chains to them and ``stacks`` starts
with those ``B`` reference rows, whose ``B K`` frames are not sent (``ref_frames`` says how many
the receiver supplies: :func:`attach_reference`). Then one frame crosses per env step.
"""

from __future__ import annotations

from typing import Optional

import torch
from tensordict import TensorDict

from distrl.data import keys
from distrl.data.frames import pack_stacks, sequence_prev, unpack_stacks

TRAJ, BOOTSTRAP, FINAL, FINAL_INDEX, VERSION = "traj", "bootstrap", "final", "final_index", "version"
#: frame-stack form: the distinct frames, each stack's ``[K]`` indices into them, and how many leading
#: frames of that table the receiver supplies from the stacks it holds (``ref``)
FRAMES, STACKS, REF_FRAMES = "stack_frames", "stacks", "ref_frames"


def pack_trajectory(traj: TensorDict, frames: bool = False, ref: Optional[torch.Tensor] = None) -> TensorDict:
    """The wire form of ``traj [B, T]``; :func:`unpack_trajectory` gives ``traj`` back, equal
    leaf for leaf (dtypes included) except the next observation of terminated steps (see above).

    ``frames``: observations ``[B, T, K, *F]`` are stacks of ``K`` frames, sent once per frame;
    ``ref [B, K, *F]``: the stacks the receiver holds (the previous message's bootstrap), to chain to."""
    B, T = traj.batch_size
    nxt = traj[keys.NEXT]
    next_obs = nxt[keys.OBSERVATION]
    truncated = nxt[keys.STEP_TRUNCATED][..., 0] & ~nxt[keys.STEP_TERMINATED][..., 0]  # [B, T]
    b, t = truncated[:, :-1].nonzero(as_tuple=True)  # episodes cut by a time limit before the last step
    final_index = b * T + t
    body = traj.exclude(keys.NEXT_OBSERVATION, keys.DONE)
    action = traj[keys.ACTION]
    if action.dtype == torch.int64 and action.numel() and 0 <= int(action.min()) and int(action.max()) <= 255:
        body[keys.ACTION] = action.to(torch.uint8)
    final = next_obs.reshape(B * T, *next_obs.shape[2:])[final_index]
    if frames:
        body = body.exclude(keys.OBSERVATION)
        out = _pack_frames(traj[keys.OBSERVATION], next_obs[:, -1], final, final_index, ref)
    else:
        out = TensorDict({BOOTSTRAP: next_obs[:, -1], FINAL: final})
    out[FINAL_INDEX] = final_index
    if keys.POLICY_VERSION in traj.keys():
        version = traj[keys.POLICY_VERSION]
        if bool((version == version.reshape(-1)[0]).all()):
            body = body.exclude(keys.POLICY_VERSION)
            out[VERSION] = version.reshape(-1)[0].clone()
    out[TRAJ] = body
    return out


def _pack_frames(
    obs: torch.Tensor,
    bootstrap: torch.Tensor,
    final: torch.Tensor,
    final_index: torch.Tensor,
    ref: Optional[torch.Tensor],
) -> TensorDict:
    """``frames``, ``stacks`` and ``ref_frames`` of ``obs [B, T, K, *F]``, ``bootstrap [B, K, *F]``
    and ``final [Q, K, *F]`` (at flat steps ``final_index [Q]``), after ``ref [B, K, *F]`` if given."""
    B, T = obs.shape[:2]
    R = 0 if ref is None else B
    if ref is not None and (ref.shape != bootstrap.shape or ref.dtype != obs.dtype):
        raise ValueError(
            f"reference stacks {tuple(ref.shape)} {ref.dtype} do not fit {tuple(bootstrap.shape)} {obs.dtype}"
        )
    rows = [obs.flatten(0, 1), bootstrap, final] if ref is None else [ref, obs.flatten(0, 1), bootstrap, final]
    prev = torch.cat(
        [
            torch.full((R,), -1),
            R + sequence_prev(B, T, torch.arange(B) - R if R else None),  # step 0 -> its reference row
            R + torch.arange(B) * T + T - 1,
            R + final_index,
        ]
    )
    table, stacks = pack_stacks(torch.cat(rows), prev)
    K = obs.shape[2]
    # reference rows chain to nothing and come first: they own the table's first R * K frames
    return TensorDict({FRAMES: table[R * K :], STACKS: stacks, REF_FRAMES: torch.tensor(R * K)})


def attach_reference(packed: TensorDict, ref: torch.Tensor) -> TensorDict:
    """``packed`` (a frame-stack form whose ``ref_frames`` the receiver supplies) made whole with
    ``ref [B, K, *F]``, the stacks the receiver holds: :func:`unpack_trajectory` then needs nothing else."""
    R = int(packed[REF_FRAMES])
    if (
        ref.flatten(0, 1).shape[0] != R
        or ref.shape[2:] != packed[FRAMES].shape[1:]
        or ref.dtype != packed[FRAMES].dtype
    ):
        raise ValueError(
            f"reference stacks {tuple(ref.shape)} {ref.dtype} do not supply {R} frames "
            f"{tuple(packed[FRAMES].shape[1:])} {packed[FRAMES].dtype}"
        )
    out = packed.clone(recurse=False)
    out[FRAMES] = torch.cat([ref.flatten(0, 1), packed[FRAMES]])
    out[REF_FRAMES] = torch.tensor(0)
    return out


def _unpack_frames(packed: TensorDict, B: int, T: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(observation [B, T, K, *F], bootstrap [B, K, *F], final [Q, K, *F])`` of a frame-stack form."""
    if int(packed[REF_FRAMES]):
        raise ValueError(f"the message chains to {int(packed[REF_FRAMES])} frames the receiver does not hold")
    stacks = unpack_stacks(packed[FRAMES], packed[STACKS])
    Q = packed[FINAL_INDEX].shape[0]
    R = stacks.shape[0] - B * T - B - Q
    if R not in (0, B):
        raise ValueError(f"{stacks.shape[0]} stacks do not fit {B} x {T} steps, {B} bootstraps and {Q} finals")
    obs, bootstrap, final = stacks[R:].split([B * T, B, Q])
    return obs.view(B, T, *obs.shape[1:]), bootstrap, final


def unpack_trajectory(packed: TensorDict) -> TensorDict:
    """``traj [B, T]`` from :func:`pack_trajectory`'s wire form. Raises ``ValueError`` when the
    parts do not fit together (a message from a broken or foreign sender, or a frame-stack form
    whose reference is missing: :func:`attach_reference`)."""
    traj = packed[TRAJ].clone(recurse=False)
    if FRAMES in packed.keys():
        traj[keys.OBSERVATION], bootstrap, final = _unpack_frames(packed, *traj.batch_size)
    else:
        bootstrap, final = packed[BOOTSTRAP], packed[FINAL]
    obs, final_index = traj[keys.OBSERVATION], packed[FINAL_INDEX]
    if traj.batch_dims != 2 or bootstrap.shape != obs.shape[:1] + obs.shape[2:] or bootstrap.dtype != obs.dtype:
        raise ValueError(
            f"bootstrap observation {tuple(bootstrap.shape)} {bootstrap.dtype} does not fit "
            f"observations {tuple(obs.shape)} {obs.dtype}"
        )
    B, T = traj.batch_size
    if (
        final.shape[1:] != obs.shape[2:]
        or final.dtype != obs.dtype
        or final_index.shape != final.shape[:1]
        or final_index.dtype != torch.int64
        or (final_index.numel() and not 0 <= int(final_index.min()) <= int(final_index.max()) < B * T)
    ):
        raise ValueError(
            f"final observations {tuple(final.shape)} at {tuple(final_index.shape)} indices "
            f"do not fit observations {tuple(obs.shape)}"
        )
    next_obs = torch.empty_like(obs)
    next_obs[:, :-1] = obs[:, 1:]
    next_obs[:, -1] = bootstrap
    next_obs.view(B * T, *obs.shape[2:])[final_index] = final
    nxt = traj[keys.NEXT]
    nxt[keys.OBSERVATION] = next_obs
    nxt[keys.STEP_DONE] = nxt[keys.STEP_TERMINATED] | nxt[keys.STEP_TRUNCATED]
    if traj[keys.ACTION].dtype == torch.uint8:
        traj[keys.ACTION] = traj[keys.ACTION].long()
    if VERSION in packed.keys():
        traj[keys.POLICY_VERSION] = packed[VERSION].to(torch.int64).expand(B, T).clone()
    return traj


#: ``[]`` int64 beside a frame-stack trajectory: the sender's message number (0, 1, ...); and, in the
#: receiver's reply, the number of the message whose bootstrap stacks it now holds (``-1``: none)
FRAMES_SEQ, FRAMES_ACK = "frames_seq", "frames_ack"


class FrameSender:
    """A sender's side of the frame-stack stream: numbers its messages and chains each to the
    bootstrap stacks of the previous one once the receiver has acknowledged holding them, so each
    frame crosses once even across messages. One message in flight at a time (IMPALA's actor)."""

    def __init__(self) -> None:
        self.seq = -1
        self.bootstrap: Optional[torch.Tensor] = None  # [B, K, *F] of message ``seq``

    def pack(self, traj: TensorDict, acked: int) -> tuple[TensorDict, torch.Tensor]:
        """``(packed, seq)`` for ``traj [B, T]``; ``acked``: what the receiver's last reply said it holds."""
        bootstrap = traj[keys.NEXT_OBSERVATION][:, -1]
        ref = self.bootstrap if acked == self.seq and self.bootstrap is not None else None
        if ref is not None and (ref.shape != bootstrap.shape or ref.dtype != bootstrap.dtype):
            ref = None
        self.seq += 1
        self.bootstrap = bootstrap.clone()
        return pack_trajectory(traj, frames=True, ref=ref), torch.tensor(self.seq)


class FrameReceiver:
    """The receiver's side: per sender, the bootstrap stacks of its last message it unpacked.
    Thread-safe across senders; each sender's messages come one at a time."""

    def __init__(self) -> None:
        self.held: dict[int, tuple[int, torch.Tensor]] = {}

    def attach(self, sender: int, seq: int, packed: TensorDict) -> TensorDict:
        """``packed`` made whole (:func:`attach_reference`) if it chains to message ``seq - 1``'s
        stacks; ``ValueError`` if this receiver does not hold them."""
        if FRAMES not in packed.keys() or not int(packed[REF_FRAMES]):
            return packed
        held = self.held.get(sender)
        if held is None or held[0] != seq - 1:
            raise ValueError(f"message {seq} chains to frames of message {seq - 1}, which this receiver does not hold")
        return attach_reference(packed, held[1])

    def hold(self, sender: int, seq: int, traj: Optional[TensorDict]) -> torch.Tensor:
        """Keep ``traj``'s bootstrap stacks (``None``: the message failed, forget the sender's);
        returns the acknowledgement for the reply."""
        if traj is None:
            self.held.pop(sender, None)
            return torch.tensor(-1)
        self.held[sender] = (seq, traj[keys.NEXT_OBSERVATION][:, -1].clone())
        return torch.tensor(seq)
