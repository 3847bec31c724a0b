"""Ape-X's SAC learner (distrl/recipes/apex/sac.py): picked by the action space or ``algo.learner``,
the MuJoCo preset, the actor's inserts (random first steps, squashed actions, priorities) through the
wire format, and end to end: a short run on InvertedPendulum-v5 learns past random actions and
loads back as a TorchRL actor playing the squashed mean."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from distrl.config import override
from distrl.data import keys
from distrl.recipes import get_recipe
from distrl.recipes.apex.config import learner_kind
from distrl.recipes.apex.recipe import default as dqn_default
from distrl.recipes.apex.recipe import mujoco
from distrl.recipes.apex.sac import ApexSACActor
from distrl.recipes.base import MUJOCO_ENVS
from distrl.runtime.context import RoleContext
from distrl.transport.local import LocalHub
from helpers import assert_beats_random, read_summary

pytest.importorskip("mujoco")
PENDULUM = "InvertedPendulum-v5"


def test_the_action_space_picks_the_learner():
    apex = get_recipe("apex")
    assert learner_kind(dqn_default()) == "dqn"
    assert learner_kind(override(dqn_default(), **{"run.env": PENDULUM})) == "sac"
    sac = override(mujoco(), **{"run.env": PENDULUM})
    apex.check_config(sac)
    apex.check_config(override(sac, **{"algo.learner": "auto"}))
    with pytest.raises(ValueError, match="algo.learner=dqn for discrete"):
        apex.check_config(override(sac, **{"run.env": "CartPole-v1"}))
    with pytest.raises(ValueError, match="is continuous: use algo.learner=sac"):
        apex.check_config(override(sac, **{"algo.learner": "dqn"}))
    with pytest.raises(ValueError, match="algo.learner"):
        override(sac, **{"algo.learner": "ddpg"})


def test_every_mujoco_id_picks_the_sac_preset():
    from distrl.cli.options import default_experiment

    assert all(default_experiment("apex", e) == "mujoco" for e in MUJOCO_ENVS)
    cfg, a = mujoco(), mujoco().algo
    assert cfg.run.env == "HalfCheetah-v5" and a.learner == "sac"
    assert (a.lr, a.batch_size, a.tau, a.gamma, a.n_step) == (3e-4, 256, 0.005, 0.99, 1)
    assert a.samples_per_insert / a.batch_size == 1.0  # one update per env step
    assert cfg.net.hidden == (256, 256) and cfg.net.activation == "relu"


def _actor(tmp_path, **changes) -> ApexSACActor:
    base = {"run.env": PENDULUM, "run.logger": "none", "run.run_dir": str(tmp_path), "algo.envs_per_actor": 2}
    cfg = override(mujoco(), **(base | {"algo.unroll_length": 5} | changes))
    return ApexSACActor(RoleContext(cfg, LocalHub(3).endpoint(2), 2, {0: "learner", 1: "replay", 2: "actor"}, tmp_path))


def test_actor_plays_random_then_its_policy_and_inserts_through_the_wire(tmp_path):
    actor = _actor(tmp_path, **{"algo.random_steps": 10})  # one actor: 10 steps = 5 vector steps of 2 envs
    assert actor.random_left == 10 and actor.epsilon == 0.0
    low, high = actor.low, actor.high
    first, priority = actor.transitions(actor.runner.unroll(actor._act, 5)[0])
    assert actor.random_left == 0 and first[keys.ACTION].shape == (10, 1) and first[keys.ACTION].dtype == torch.float32
    assert (priority == 1).all()  # uniform sampling (the preset's algo.alpha = 0) reads no priority
    # the policy's own actions: every one in the box, and not the deterministic mean
    traj = actor.runner.unroll(actor._act, 5)[0]
    a = traj[keys.ACTION]
    assert ((a >= low) & (a <= high)).all() and not torch.allclose(a, actor.model.greedy(traj[keys.OBSERVATION]))
    second, _ = actor.transitions(traj)
    assert set(keys.APEX_IN_KEYS) <= set(second.keys(include_nested=True, leaves_only=True))
    torch.testing.assert_close(second[keys.ACTION], a.reshape(-1, 1))
    actor.runner.close()


def test_prioritized_inserts_carry_td_errors_and_a_resumed_run_skips_random_steps(tmp_path):
    actor = _actor(tmp_path, **{"algo.alpha": 0.6, "algo.random_steps": 100})
    actor._load(TensorDict({keys.STOP: torch.tensor(False)}))  # a fresh run's hello: no parameters
    assert actor.random_left == 100
    _, priority = actor.transitions(actor.runner.unroll(actor._act, 5)[0])
    assert priority.shape == (10,) and (priority > 0).all() and torch.isfinite(priority).all()
    params = TensorDict({k: v.clone() for k, v in actor.model.state_dict().items()})
    resumed = _actor(tmp_path, **{"algo.random_steps": 100})
    resumed._load(TensorDict({keys.STOP: torch.tensor(False), keys.PARAMS: params, keys.PARAMS_VERSION: 7}))
    assert resumed.random_left == 0 and resumed.version == 7
    actor.runner.close()
    resumed.runner.close()


#: what the run must beat random actions by (helpers.assert_beats_random: random 8.5 on the 10 evaluation
#: episodes, an untrained policy's mean ~26). Runs of this test, 2 cores shared with a timed experiment
#: (niced, so at 40-90 env steps/s): see docs/apex.md.
MARGIN = 30.0


@pytest.mark.timeout(360)
def test_inverted_pendulum_learns_loads_back_and_resumes(tmp_path, jobs):
    """The mujoco preset on InvertedPendulum-v5 at world size 1 (learner, one shard, one actor of 4 envs
    in one process): 500 random steps, learning from 500 transitions, one update per env step, until
    1.5k env steps (or 75 s on a loaded machine; 2026-12-06 at a load of 6: 1.2k and 1.5k steps gave
    greedy 102.0 and 102.4, 2k 211.5, against the bar of 38.5). Its last policy's greedy return beats
    random actions by :data:`MARGIN`, ``load_policy`` gives back a TanhNormal actor that plays the same
    squashed mean, and ``--resume`` goes on from the checkpoint's updates, replay and target critics
    for 200 more steps."""
    from distrl.nn.trained_policy import load_policy, load_run
    from distrl.nn.sac import sac_from_state
    from distrl.config import NetConfig, from_dict

    run = tmp_path / "run"
    sets = {"algo.random_steps": 500, "algo.min_replay_size": 500, "algo.capacity": 20_000}
    sets |= {"run.eval_episodes": 10, "run.eval_interval_s": 0}
    common = ["apex", "--env", PENDULUM, "--run-dir", str(run), "--logger", "none"]
    common += [x for k, v in sets.items() for x in ("--set", f"{k}={v}")]
    args = common + ["--total-frames", "1500", "--max-time-s", "75"]
    proc = jobs.train(args, timeout=150)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    s = read_summary(run)
    assert s["stop_reason"] in ("total_frames", "max_time") and s["learner_updates"] > 500, s
    assert_beats_random(s, MARGIN)

    actor = load_policy(run, checkpoint="last")
    cfg, state = load_run(run, "last")
    assert state["policy_network"] == "sac"
    model = sac_from_state(state["model"], from_dict(NetConfig, cfg["net"]))
    obs = torch.randn(7, 4)
    out = actor(TensorDict({keys.OBSERVATION: obs}, [7]))
    torch.testing.assert_close(out[keys.ACTION], model.greedy(obs))
    assert out[keys.ACTION].abs().max() <= 3.0  # InvertedPendulum's box is [-3, 3]

    # the checkpoint holds the replay and the target critics; --resume goes on from them
    assert {"replay", "target", "replay_rng"} <= set(state["extra"]), state["extra"].keys()
    # (the budgets count the whole run: the resumed part gets 200 env steps, and time to take them)
    args = common + ["--total-frames", str(s["env_frames"] + 200), "--max-time-s", str(s["wall_s"] + 60)]
    proc = jobs.train(args + ["--resume"], timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"resumed from update {s['learner_updates']}" in proc.stdout, proc.stdout[-3000:]
    r = read_summary(run)
    assert r["learner_updates"] > s["learner_updates"] and r["replay_size"] > s["replay_size"], (r, s)
