"""The keys each loss reads are exactly what the actors produce (style rule 3)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from distrl.recipes import get_recipe
from distrl.recipes.base import RoleContext
from distrl.config import override
from distrl.data import keys
from distrl.recipes.impala.actor import ImpalaActor
from distrl.transport.local import LocalHub


@pytest.mark.parametrize("env", ["CartPole-v1", "distrl.envs.torchrl_factories:cartpole_with_stepcounter"])
def test_impala_actor_message_carries_the_learner_keys(tmp_path: Path, env: str):
    """The gymnasium path and the TorchRL Collector path (a factory env, docs/torchrl.md door 1) alike."""
    cfg = override(get_recipe("impala").default_config(),
                   **{"run.env": env, "algo.envs_per_actor": 3, "algo.unroll_length": 5})
    hub = LocalHub(2)
    actor = ImpalaActor(RoleContext(cfg, hub.endpoint(1), 1, {0: "learner", 1: "actor"}, tmp_path))
    msg = actor._unroll()
    traj = msg["traj"]
    assert tuple(traj.batch_size) == (3, 5)  # [B, T], batch-major
    produced = set(traj.keys(include_nested=True, leaves_only=True))
    assert set(keys.IMPALA_IN_KEYS) <= produced
    assert traj[keys.OBSERVATION].shape == (3, 5, 4) and traj[keys.OBSERVATION].dtype == torch.float32
    assert traj[keys.ACTION].dtype == torch.int64
    assert traj[keys.REWARD].shape == traj[keys.DONE].shape == (3, 5, 1)
    assert (traj[keys.POLICY_VERSION] == -1).all()  # no parameters received yet
    # consecutive steps chain: next observation of t is the observation of t+1 unless the episode ended
    not_done = ~traj[keys.DONE][:, :-1, 0]
    torch.testing.assert_close(traj[keys.NEXT_OBSERVATION][:, :-1][not_done], traj[keys.OBSERVATION][:, 1:][not_done])
    actor.runner.close()
