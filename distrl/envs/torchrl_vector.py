"""A user's TorchRL env factory behind the gymnasium vector-env calls the policy-free roles make.

``seed``'s env workers and ``sf``'s rollout workers hold no policy: actions come from an
inference rank, one env step at a time, so there is no policy for a TorchRL ``Collector`` to run
(impala and apex actors, which act locally, do collect through one: ``collector_runner.py``).
``a3c``'s workers own their policy but need its gradient, not a ``[B, T]`` batch of frames
collected under ``no_grad``. These roles step envs through the few calls of
``gymnasium.vector.SyncVectorEnv`` they make: ``reset(seed=) -> (obs, info)`` and
``step(actions) -> (obs, reward, terminated, truncated, info)`` with ``SAME_STEP`` autoreset
(``info["final_obs"]`` holds the true last observation of an episode that just ended). This
class gives a factory's ``EnvBase`` those calls, with TorchRL's ``step_and_maybe_reset`` (the
call its collectors make) underneath, so the roles run unchanged on either kind of env: the same
observations (a flat float32 vector, or an image channels first in its own dtype) and actions
(indices, or a box's float32 vector, clipped to the box by the env).
"""

from __future__ import annotations

import numpy as np
import torch
from tensordict import TensorDictBase

from distrl.data import keys
from distrl.envs.torchrl_env import as_obs, check_factory, end_flags, make_env, one_hot_actions, quiet_torchrl


class TorchRLVectorEnv:
    """``num_envs`` envs of factory ``spec`` (one ``EnvBase``, ``batch_size [num_envs]``) as a
    ``SAME_STEP`` gymnasium vector env."""

    def __init__(self, spec: str, num_envs: int, seed: int):
        self.spec, self.num_envs = spec, num_envs
        self.num_actions = check_factory(spec).num_actions  # None: a box
        self.env = make_env(spec, num_envs, seed)
        self.one_hot = one_hot_actions(self.env)
        self._td: TensorDictBase | None = None  # the current step's input: observation (+ transform state)

    def _obs(self, td: TensorDictBase) -> np.ndarray:
        """``observation [B, *F]`` of ``td`` as numpy (float32, or the image's own dtype)."""
        return as_obs(td.get(keys.OBSERVATION)).numpy()

    def reset(self, seed: int | None = None) -> tuple[np.ndarray, dict]:
        """Reset every env (reseeded from ``seed`` when given); ``(obs [B, *F], {})``."""
        with quiet_torchrl():
            if seed is not None:
                self.env.set_seed(seed)
            self._td = self.env.reset()
        return self._obs(self._td), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        """Step with ``action [B]`` (indices) or ``[B, A]`` (a box's); envs whose episode ended are
        reset in the same call.

        Returns ``obs [B, *F]`` (a reset env's first observation), ``reward [B]`` float64 (as gymnasium's),
        ``terminated [B]`` and ``truncated [B]`` bool, and ``info`` with ``final_obs [B, *F]``:
        every env's true next observation, the one to bootstrap from where an episode ended."""
        if self._td is None:
            self.reset()
        td = self._td
        if self.num_actions is None:
            td.set(keys.ACTION, torch.as_tensor(np.asarray(action), dtype=torch.float32).reshape(self.num_envs, -1))
        else:
            a = torch.as_tensor(np.asarray(action), dtype=torch.int64).reshape(self.num_envs)
            td.set(keys.ACTION, torch.nn.functional.one_hot(a, self.num_actions) if self.one_hot else a)
        with quiet_torchrl():
            out, self._td = self.env.step_and_maybe_reset(td)
        nxt = out.get(keys.NEXT)
        _, terminated, truncated = end_flags(nxt, (self.num_envs,))
        reward = nxt.get(keys.STEP_REWARD).reshape(self.num_envs).to(torch.float64).numpy()  # gymnasium's dtype
        return (self._obs(self._td), reward, terminated.numpy(), truncated.numpy(), {"final_obs": self._obs(nxt)})

    def close(self) -> None:
        if not self.env.is_closed:
            self.env.close()
