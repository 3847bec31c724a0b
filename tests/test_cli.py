"""launch/train.py as a user meets it: --help, and one-line errors before any process group."""

from __future__ import annotations

import pytest


def test_help_explains_every_option(jobs):
    proc = jobs.train(["impala", "--help"], timeout=60)
    assert proc.returncode == 0
    for opt in (
        "--env",
        "--seed",
        "--total-frames",
        "--max-time-s",
        "--target-return",
        "--run-dir",
        "--logger",
        "--experiment",
        "--set",
        "--resume",
    ):
        assert opt in proc.stdout


def _status(argv: list[str]) -> int:
    """launch/train.py's exit status for ``argv``, in this process: none of these starts anything (the
    quick tier's guard refuses a process, a group or a recipe run), so a process of its own would
    only add its start-up."""
    from distrl.train import main

    try:
        return main(argv)
    except SystemExit as e:  # argparse's own errors
        return e.code


@pytest.mark.parametrize(
    "args,message",
    [
        (["impala", "--bogus"], "unrecognized arguments: --bogus"),
        (["impala", "--env", "CartPol-v1"], "unknown env id 'CartPol-v1'; did you mean CartPole-v1"),
        (["sac"], "unknown recipe 'sac'; known recipes: a3c, apex"),
        (["impala", "--set", "algo.lr=-1"], "algo.lr must be > 0"),
        (["apex", "--env", "Pendulum-v1", "--set", "algo.learner=dqn"], "double-DQN learner (algo.learner=dqn)"),
        (["apex", "--set", "algo.learner=sac"], "SAC learner (algo.learner=sac) takes flat observations and a Box"),
        (["impala", "--nproc", "3", "--env", "CartPol-v1"], "unknown env id 'CartPol-v1'"),  # before any process
    ],
)
def test_bad_input_is_one_line(args, message, tmp_path, capsys):
    assert _status(args + ["--run-dir", str(tmp_path / "run")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
    assert not (tmp_path / "run").exists()  # nothing written, nothing started


def test_bad_input_is_one_line_on_a_fresh_process_stderr(tmp_path, jobs):
    """What a user sees: the whole stderr of a new process (imports and all) is the one line."""
    proc = jobs.train(["impala", "--nproc", "3", "--env", "CartPol-v1", "--run-dir", str(tmp_path / "run")], timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "unknown env id 'CartPol-v1'" in lines[0], lines
    assert not (tmp_path / "run").exists()


def test_bad_input_under_torchrun_fails_before_the_group(jobs):
    proc = jobs.train(["impala", "--env", "NoSuchEnv-v0"], nproc=2, timeout=120)
    assert proc.returncode != 0
    assert proc.stderr.count("error: unknown env id 'NoSuchEnv-v0'") == 1  # said once, by rank 0


def test_print_config(capsys):
    assert _status(["impala", "--print-config", "--set", "net.hidden=32,32"]) == 0
    assert '"hidden": [\n      32,\n      32\n    ]' in capsys.readouterr().out


def test_env_picks_the_experiment_tuned_for_it(capsys):
    """``vecenv --env Pendulum-v1`` starts from distrl/recipes/vecenv/recipe.py's ``pendulum``, not CartPole's
    settings with Pendulum swapped in; an explicit ``--experiment`` wins."""
    import json

    assert _status(["vecenv", "--env", "Pendulum-v1", "--print-config"]) == 0
    out, err = capsys.readouterr()
    assert "starting from experiment 'pendulum'" in err
    cfg = json.loads(out)
    assert cfg["run"]["env"] == "Pendulum-v1" and cfg["algo"]["gamma"] == 0.95
    assert _status(["vecenv", "--env", "Pendulum-v1", "--experiment", "debug", "--print-config"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["algo"]["gamma"] != 0.95 and "starting from" not in err


def test_resume_continues_the_saved_config_and_refuses_what_it_cannot_continue(tmp_path, capsys):
    """``--resume`` starts from the run's config.json (a custom network comes back without
    repeating ``--set``); a missing run directory or another recipe's run is a one-line error."""
    import json

    from distrl.cli.options import build_config, make_parser
    from distrl.cli.runner import plan

    run = tmp_path / "run"
    run.mkdir()
    # the config.json a run of these options holds: what --print-config prints, built here (no process)
    args = make_parser().parse_args(["impala", "--experiment", "debug", "--set", "net.hidden=32"])
    (run / "config.json").write_text(plan(build_config(args), 1).cfg.to_json())
    assert _status(["impala", "--resume", "--run-dir", str(run), "--total-frames", "99999", "--print-config"]) == 0
    cfg = json.loads(capsys.readouterr().out)
    assert cfg["net"]["hidden"] == [32] and cfg["run"]["env"] == "distrl/MatchSign-v0"
    assert cfg["run"]["resume"] is True and cfg["run"]["total_frames"] == 99999

    for args, message in [
        (["impala", "--resume", "--run-dir", str(tmp_path / "typo")], "not a run directory"),
        (["seed", "--resume", "--run-dir", str(run)], "is a 'impala' run, not 'seed'"),
        (["impala", "--resume", "--run-dir", str(run), "--env", "CartPole-v1"], "not CartPole-v1"),
    ]:
        status, err = _status(args), capsys.readouterr().err
        assert status == 2 and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "typo").exists()


def test_a_new_run_never_overwrites_an_old_one(tmp_path, capsys):
    """Refused before anything is written. Under torchrun every rank refuses before the group forms:
    tests/test_launch.py::test_another_jobs_run_is_refused_on_every_rank runs that job."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")
    (run / "checkpoints").mkdir()
    assert _status(["impala", "--experiment", "debug", "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err
    assert "already holds a run: add --resume" in err, err
    assert (run / "config.json").read_text() == "{}" and not list((run / "checkpoints").iterdir())


def test_recipe_help_lists_its_config_fields_and_experiments(capsys):
    """``RECIPE --help``: every config field with its type, default and ``#:`` doc, and the
    experiment functions; the generic ``--help`` stays short (no field table)."""
    from distrl.cli.help import config_fields
    from distrl.recipes.seed.recipe import default
    from distrl.train import main

    assert main(["seed", "--help"]) == 0
    out = capsys.readouterr().out
    for name, typ, value, doc in config_fields(default()):
        line = next((ln for ln in out.splitlines() if ln.split()[:1] == [name]), None)
        assert line is not None and typ in line and doc in line, name
    assert "float | None" in out
    assert "algo.batch_size" in out and "trajectories" in out  # a seed field with its doc
    for experiment in ("default", "debug", "debug_lstm", "lstm_cartpole"):
        assert f"  {experiment} " in out
    assert main(["--help"]) == 0
    generic = capsys.readouterr().out
    assert "config fields (--set" not in generic and "algo.gamma" not in generic and len(generic.splitlines()) < 60


@pytest.mark.parametrize(
    "item,message",
    [
        ("algo=3", "--set algo=3: 'algo' is a config section, not a field: set one of its fields, e.g. algo."),
        ("recipe=seed", "--set recipe=seed: the recipe is the command's first argument"),
        ("run=x", "'run' is a config section"),
        ("algo.nope=1", "unknown config field 'algo.nope'"),
        ("algo.lr=fast", "algo.lr expects float, got 'fast'"),
        ("net.hidden=a,b", "net.hidden expects int"),
        ("run.resume=maybe", "run.resume expects a boolean"),
        ("=3", "unknown config field ''"),
        ("algo.lr", "--set expects KEY=VALUE"),
    ],
)
def test_every_bad_set_is_one_line_naming_the_field(item, message, capsys):
    from distrl.train import main

    assert main(["impala", "--set", item, "--print-config"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err, err


@pytest.mark.parametrize("recipe", ["impala", "seed", "vecenv"])
def test_no_value_of_any_field_ends_in_a_traceback(recipe):
    """Every field, set to values of every wrong kind, builds a config or raises ValueError."""
    import argparse

    from distrl.cli.options import build_config
    from distrl.cli.options import experiment_config
    from distrl.cli.help import config_fields

    for name, *_ in config_fields(experiment_config(recipe, "default")):
        for value in ("x", "", "none", "-1", "0", "1e30", "nan", "1,2"):
            args = argparse.Namespace(
                recipe=recipe,
                experiment="default",
                resume=False,
                run_dir=None,
                env=None,
                seed=None,
                total_frames=None,
                max_time_s=None,
                target_return=None,
                logger=None,
                overrides=[f"{name}={value}"],
            )
            try:
                build_config(args)
            except ValueError as e:
                assert name in str(e) or "--set" in str(e)


def test_every_subcommand_is_listed_and_its_help_shows_defaults(capsys):
    """``distrl --help`` names every subcommand; each one's ``--help`` works through the console and
    shows its defaults; an unknown command is one line."""
    from distrl.train import COMMANDS, console

    assert console(["--help"]) == 0
    listing = capsys.readouterr().out
    for name in ("train", "compare", "sweep", "plot", "eval", "export-policy"):
        assert f"\n  {name} " in listing and name in COMMANDS
    defaults = {
        "train": "(default: 1)",
        "compare": "(default: CartPole-v1)",
        "sweep": "(default: 0-9)",
        "plot": "(default: curves.png)",
        "eval": "(default: 10)",
        "export-policy": "(default: checkpoints/best.pt)",
    }
    for name, default in defaults.items():
        try:
            status = console([name, "--help"])
        except SystemExit as e:  # argparse's --help
            status = e.code
        assert status == 0, name
        text = capsys.readouterr().out
        assert text.startswith(f"usage: distrl {name}") and default in " ".join(text.split()), (name, text)
    assert console(["trian"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: unknown command 'trian'") and "compare" in err
    assert console([]) == 2 and "commands:" in capsys.readouterr().err


def test_env_help_names_the_recipes_that_step_a_torchrl_env(capsys):
    """The help says which recipes take ``--env module:function``: those whose Recipe says so."""
    from distrl.cli.options import make_parser
    from distrl.recipes import RECIPE_NAMES, get_recipe

    text = " ".join(make_parser().format_help().split())
    able = [n for n in RECIPE_NAMES if get_recipe(n).takes_env_factory]
    assert f"returning a TorchRL env, which {', '.join(able)} step" in text
    assert "vecenv takes a batched one through --set algo.env_factory=module:function" in text
    assert "impala, apex" not in text
