"""What an IMPALA actor sends: the check the learner and the fleet run on every trajectory.

A trajectory crosses the wire packed (:func:`distrl.data.compact.pack_trajectory`: each observation
once); :func:`receive_trajectory` unpacks and checks it, for the learner and the fleet alike.
"""

from __future__ import annotations

from typing import Optional

import torch
from tensordict import TensorDict

from distrl.data import keys
from distrl.data.compact import unpack_trajectory


def check_trajectory(
    traj: TensorDict,
    obs_shape: tuple[int, ...],
    obs_dtype: torch.dtype = torch.float32,
    action_spec: Optional[tuple[tuple[int, ...], torch.dtype]] = None,
) -> Optional[str]:
    """Why ``traj`` cannot be learned from, or ``None`` if it is a well-formed ``[B, T]`` batch of
    :data:`distrl.data.keys.IMPALA_IN_KEYS` with ``observation [B, T, *obs_shape]`` of ``obs_dtype``
    (float32 for vectors; an image's own uint8 or bool) and, given ``action_spec`` (the learner's
    ``(head.action_shape, head.action_dtype)``), ``action [B, T, *shape]`` of that dtype: int64
    ``[B, T]`` indices, or finite float32 ``[B, T, A]`` draws of a Gaussian."""
    missing = [k for k in keys.IMPALA_IN_KEYS if k not in traj.keys(include_nested=True)]
    if missing:
        return f"missing keys {missing}"
    if traj.batch_dims != 2:
        return f"batch dims {tuple(traj.batch_size)} are not [B, T]"
    obs = traj[keys.OBSERVATION]
    if obs.dtype != obs_dtype or tuple(obs.shape[2:]) != tuple(obs_shape):
        want = ", ".join(map(str, obs_shape))
        dtype = str(obs_dtype).removeprefix("torch.")
        return f"observation {tuple(obs.shape)} {obs.dtype}, expected [B, T, {want}] {dtype}"
    if obs.is_floating_point() and not torch.isfinite(obs).all():
        return "non-finite observation"
    if not torch.isfinite(traj[keys.REWARD]).all():
        return "non-finite reward"
    if action_spec is not None:
        action, (shape, dtype) = traj[keys.ACTION], action_spec
        if action.dtype != dtype or tuple(action.shape[2:]) != tuple(shape):
            want = "".join(f", {n}" for n in shape)
            name = str(dtype).removeprefix("torch.")
            return f"action {tuple(action.shape)} {action.dtype}, expected [B, T{want}] {name}"
        if action.is_floating_point() and not torch.isfinite(action).all():
            return "non-finite action"
    return None


def finite_rows(traj: TensorDict) -> torch.Tensor:
    """``[B]`` bool: which rows of ``traj [B, T]`` have every floating-point leaf (observations,
    rewards, a Gaussian's actions...) finite. A NaN reward or observation is poisoned data: learned
    from, it turns the loss NaN, or folds into the observation statistics for good."""
    ok = torch.ones(traj.shape[0], dtype=torch.bool, device=traj.device)
    for v in traj.values(include_nested=True, leaves_only=True):
        if v.is_floating_point():
            ok &= torch.isfinite(v).flatten(1).all(1)
    return ok


def receive_trajectory(
    packed: TensorDict,
    obs_shape: tuple[int, ...],
    obs_dtype: torch.dtype = torch.float32,
    action_spec: Optional[tuple[tuple[int, ...], torch.dtype]] = None,
) -> tuple[Optional[TensorDict], Optional[str]]:
    """``(traj [B, T], problem)`` from an actor's packed trajectory: ``traj`` unpacked (``None`` when
    the packed parts do not fit together), and why it cannot be learned from, in one line (``None``
    if it can: :func:`check_trajectory`, ``action_spec`` as there)."""
    try:
        traj = unpack_trajectory(packed)
    except (KeyError, TypeError, ValueError) as e:  # a broken or foreign sender: a part missing or of the wrong kind
        lines = str(e).strip("'\"").splitlines()  # a KeyError's message comes quoted
        return None, lines[0] if lines else type(e).__name__
    return traj, check_trajectory(traj, obs_shape, obs_dtype, action_spec)
