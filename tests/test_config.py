"""Config invariants, overrides, and the CLI's one-line errors (in process)."""

from __future__ import annotations

import dataclasses

import pytest

from distrl.recipes import get_recipe
from distrl.recipes.impala.recipe import ImpalaConfig
from distrl.cli.options import build_config, make_parser
from distrl.config import Config, NetConfig, RunConfig, TransportConfig, from_dict, override
from distrl.cli.runner import plan


def impala_cfg(**changes) -> Config:
    return override(get_recipe("impala").default_config(), **changes)


@pytest.mark.parametrize(
    "bad",
    [
        lambda: RunConfig(total_frames=0),
        lambda: RunConfig(logger="tensorboard"),
        lambda: RunConfig(device="tpu"),
        lambda: TransportConfig(backend="grpc"),
        lambda: TransportConfig(call_timeout_s=0),
        lambda: NetConfig(hidden=()),
        lambda: ImpalaConfig(unroll_length=0),
        lambda: ImpalaConfig(gamma=1.5),
    ],
)
def test_invariants_raise_value_error(bad):
    with pytest.raises(ValueError):
        bad()


def test_config_is_read_only():
    cfg = impala_cfg()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.run.seed = 3


def test_override_coerces_and_revalidates():
    cfg = impala_cfg(**{"algo.lr": "3e-4", "net.hidden": "128,128", "run.target_return": "none", "run.resume": "true"})
    assert cfg.algo.lr == 3e-4 and cfg.net.hidden == (128, 128)
    assert cfg.run.target_return is None and cfg.run.resume is True
    with pytest.raises(ValueError, match="algo.unroll_length"):
        impala_cfg(**{"algo.unroll_length": "0"})
    with pytest.raises(ValueError, match="unknown config field 'algo.learning_rate'"):
        impala_cfg(**{"algo.learning_rate": "1"})
    with pytest.raises(ValueError, match="expects int"):
        impala_cfg(**{"run.seed": "one"})


def test_round_trip_through_dict():
    cfg = impala_cfg(**{"net.hidden": "32", "run.seed": "7"})
    data = cfg.to_dict()
    back = from_dict(Config, {**data, "algo": ImpalaConfig(**data["algo"])})
    assert back == cfg


def test_derived_values_are_properties():
    algo = ImpalaConfig(envs_per_actor=4, unroll_length=5, batch_trajectories=3)
    assert algo.frames_per_batch == 60


def parse(*argv):
    return build_config(make_parser().parse_args(list(argv)))


def test_cli_options_land_in_config():
    cfg = parse(
        "impala",
        "--env",
        "Acrobot-v1",
        "--seed",
        "3",
        "--total-frames",
        "1000",
        "--max-time-s",
        "9",
        "--target-return",
        "-100",
        "--run-dir",
        "/tmp/x",
        "--logger",
        "none",
        "--set",
        "algo.lr=0.01",
    )
    assert (cfg.run.env, cfg.run.seed, cfg.run.total_frames, cfg.run.max_time_s) == ("Acrobot-v1", 3, 1000, 9.0)
    assert (cfg.run.target_return, cfg.run.run_dir, cfg.run.logger, cfg.algo.lr) == (-100.0, "/tmp/x", "none", 0.01)


def test_debug_experiment_and_unknown_experiment():
    assert parse("impala", "--experiment", "debug").run.env == "distrl/MatchSign-v0"
    with pytest.raises(ValueError, match="unknown experiment 'nope'.*debug"):
        parse("impala", "--experiment", "nope")


def test_plan_rejects_what_cannot_run():
    with pytest.raises(ValueError, match="unknown env id 'CartPol-v1'; did you mean CartPole-v1"):
        plan(impala_cfg(**{"run.env": "CartPol-v1"}), 3)
    with pytest.raises(ValueError, match="continuous"):  # Ape-X's double DQN: discrete actions only
        plan(override(get_recipe("apex").default_config(), **{"run.env": "Pendulum-v1", "algo.learner": "dqn"}), 3)
    with pytest.raises(ValueError, match="transport.backend=rpc"):
        plan(impala_cfg(**{"transport.backend": "rpc"}), 1)


def test_plan_fills_run_dir_once():
    p = plan(impala_cfg(), 3)
    assert p.cfg.run.run_dir.startswith("runs/impala-CartPole-v1-")
    assert p.roles == {0: "learner", 1: "actor", 2: "actor"}


def test_world_size_the_recipe_cannot_fill():
    recipe = dataclasses.replace(
        get_recipe("impala"), min_world_size=3, layout="rank 0 learner, rank 1 replay, ranks 2.. actors"
    )
    with pytest.raises(ValueError, match=r"cannot run on 2 processes: it needs rank 0 learner, rank 1 replay"):
        recipe.rank_table(2, impala_cfg())
    assert recipe.rank_table(1, impala_cfg()) == {0: "learner", 1: "actor", 2: "actor"}  # local
    assert len(recipe.rank_table(5, impala_cfg())) == 5


def test_every_role_builder_names_a_class_that_exists():
    """Builders import their role lazily; a misspelt path must fail here, not on a rank at launch. A
    builder names a role class, or a function that picks one (apex's learner: SAC's or double DQN's)."""
    import importlib
    import inspect

    from distrl.recipes import RECIPE_NAMES

    for name in RECIPE_NAMES:
        recipe = get_recipe(name)
        assert set(recipe.roles_for(max(recipe.min_world_size, 2))) <= set(recipe.builders)
        for builder in recipe.builders.values():
            module, _, cls = builder.target.partition(":")
            target = getattr(importlib.import_module(module), cls, None)
            assert inspect.isclass(target) or inspect.isfunction(target), builder.target
