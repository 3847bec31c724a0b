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
(``uint8`` on the wire when every action fits, ``int64`` again after :func:`unpack_trajectory`).
Neither TorchRL nor tensordict has this (a ``TensorDict`` is shipped as it is); SEED's workers
send observations once per step by construction (``recipes/seed/trajectory.py``).
"""
from __future__ import annotations

import torch
from tensordict import TensorDict

from distrl.data import keys

TRAJ, BOOTSTRAP, FINAL, FINAL_INDEX, VERSION = "traj", "bootstrap", "final", "final_index", "version"


def pack_trajectory(traj: TensorDict) -> TensorDict:
    """The wire form of ``traj [B, T]``; :func:`unpack_trajectory` gives ``traj`` back, equal
    leaf for leaf (dtypes included) except the next observation of terminated steps (see above)."""
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
    out = TensorDict({BOOTSTRAP: next_obs[:, -1], FINAL: next_obs.reshape(B * T, *next_obs.shape[2:])[final_index],
                      FINAL_INDEX: final_index})
    if keys.POLICY_VERSION in traj.keys():
        version = traj[keys.POLICY_VERSION]
        if bool((version == version.reshape(-1)[0]).all()):
            body = body.exclude(keys.POLICY_VERSION)
            out[VERSION] = version.reshape(-1)[0].clone()
    out[TRAJ] = body
    return out


def unpack_trajectory(packed: TensorDict) -> TensorDict:
    """``traj [B, T]`` from :func:`pack_trajectory`'s wire form. Raises ``ValueError`` when the
    parts do not fit together (a message from a broken or foreign sender)."""
    traj = packed[TRAJ].clone(recurse=False)
    obs, bootstrap = traj[keys.OBSERVATION], packed[BOOTSTRAP]
    final, final_index = packed[FINAL], packed[FINAL_INDEX]
    if traj.batch_dims != 2 or bootstrap.shape != obs.shape[:1] + obs.shape[2:] or bootstrap.dtype != obs.dtype:
        raise ValueError(f"bootstrap observation {tuple(bootstrap.shape)} {bootstrap.dtype} does not fit "
                         f"observations {tuple(obs.shape)} {obs.dtype}")
    B, T = traj.batch_size
    if (final.shape[1:] != obs.shape[2:] or final.dtype != obs.dtype or final_index.shape != final.shape[:1]
            or final_index.dtype != torch.int64 or (final_index.numel() and not 0 <= int(final_index.min())
                                                   <= int(final_index.max()) < B * T)):
        raise ValueError(f"final observations {tuple(final.shape)} at {tuple(final_index.shape)} indices "
                         f"do not fit observations {tuple(obs.shape)}")
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
