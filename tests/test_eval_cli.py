"""``distrl eval`` and ``distrl export-policy --format pt2`` (issue #47) on runs trained for a few
seconds (a test of evaluation and export, not of learning): CartPole, MinAtar Breakout and MuJoCo's
InvertedPendulum, each evaluated for 20 episodes with a video of the first; the exported program
gives load_policy's greedy actions in a process that never imports distrl. The bootstrap interval
is checked against a slow loop, and bad input against the one-line, exit-2 rule."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torchrl.data import Categorical

from distrl.studies.evaluate import REPS, mean_interval, report
from distrl.train import console, main as train
from helpers import child_env

#: ``--env``, seconds of training, extra ``--set`` of each run (vecenv: one process, seconds to a policy)
RUNS = {"cartpole": ("CartPole-v1", 3), "minatar": ("MinAtar/Breakout-v1", 4), "mujoco": ("InvertedPendulum-v5", 3)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, starts_processes):
    """A vecenv run of each of :data:`RUNS`, trained in this process for a few seconds."""
    pytest.importorskip("minatar")
    pytest.importorskip("mujoco")
    root = tmp_path_factory.mktemp("eval-runs")
    out = {}
    for name, (env, seconds) in RUNS.items():
        run = root / name
        argv = ["vecenv", "--env", env, "--max-time-s", str(seconds), "--run-dir", str(run)]
        assert train([*argv, "--set", "run.logger=none"]) == 0
        out[name] = run
    return out


def slow_interval(xs: list[float], seed: int, reps: int, confidence: float = 0.95) -> tuple[float, float]:
    """The percentile bootstrap of the mean written out: ``reps`` resamples of ``n`` draws with
    replacement (``random.Random(seed).randrange(n)``, draw by draw), their means sorted, the central
    ``confidence`` read off with linear interpolation."""
    rng, n = random.Random(seed), len(xs)
    means = []
    for _ in range(reps):
        total = 0.0
        for _ in range(n):
            total += xs[rng.randrange(n)]
        means.append(total / n)
    tail = (1 - confidence) / 2
    return float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))


def test_the_interval_of_the_mean_is_the_bootstrap_written_out():
    xs = [float(v) for v in np.random.default_rng(3).normal(100.0, 20.0, size=20)]
    lo, hi = mean_interval(xs, seed=7)
    assert (lo, hi) == pytest.approx(slow_interval(xs, 7, REPS), abs=1e-9)
    assert mean_interval(xs, seed=7) == (lo, hi)  # seeded: the same interval every time
    assert lo < np.mean(xs) < hi
    # about mean -+ 1.96 sd / sqrt(n): 20 draws of sd 20 give a half-width near 8.8
    assert 6.0 < (hi - lo) / 2 < 12.0
    assert mean_interval([5.0] * 10, seed=0) == (5.0, 5.0)


def test_report_holds_every_episode_and_its_figures():
    r = report([1.0, 3.0, 2.0, 10.0], [5, 6, 7, 8], [100, 101, 102, 103], seed=0)
    assert r["episodes"] == 4 and r["returns"] == [1.0, 3.0, 2.0, 10.0] and r["seeds"] == [100, 101, 102, 103]
    assert r["mean"] == 4.0 and r["median"] == 2.5 and r["min"] == 1.0 and r["max"] == 10.0
    assert r["length_mean"] == 6.5 and r["ci95"][0] <= 4.0 <= r["ci95"][1]


def one_line_exit_2(argv: list[str], capsys) -> str:
    try:
        status = console(argv)
    except SystemExit as e:  # argparse's usage errors
        status = e.code
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and err.startswith("error: "), (argv, status, err)
    return err


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    assert "not a distrl run directory" in one_line_exit_2(["eval", str(tmp_path / "nowhere")], capsys)
    (tmp_path / "config.json").write_text(json.dumps({"run": {"env": "CartPole-v1", "seed": 0}}))
    assert "no loadable checkpoint" in one_line_exit_2(["eval", str(tmp_path)], capsys)
    assert "checkpoint must be one of" in one_line_exit_2(["eval", str(tmp_path), "--checkpoint", "nope"], capsys)
    one_line_exit_2(["eval", str(tmp_path), "--episodes", "0"], capsys)
    one_line_exit_2(["eval", str(tmp_path), "--policy", "boltzmann"], capsys)
    one_line_exit_2(["eval", str(tmp_path), "--max-steps", "0"], capsys)
    assert "must be in [0, 1)" in one_line_exit_2(["eval", str(tmp_path), "--sticky-actions", "1"], capsys)
    one_line_exit_2(["export-policy", str(tmp_path), str(tmp_path / "p.pt2"), "--format", "onnx"], capsys)


def test_max_steps_ends_every_episode_there():
    """``play_episodes(max_steps=N)`` (``distrl eval --max-steps``): CartPole's episodes under a random
    policy, each cut at 12 steps at most, the return counted to the cut (+1 a step)."""
    import torch

    from distrl.envs.gym import play_episodes

    def random_act(obs):
        return torch.randint(0, 2, (obs.shape[0],))

    torch.manual_seed(0)
    full = play_episodes(random_act, "CartPole-v1", 16, seed=3)
    torch.manual_seed(0)  # the same actions: the same episodes, to the cut
    cut = play_episodes(random_act, "CartPole-v1", 16, seed=3, max_steps=12)
    assert min(full.lengths) < 12 < max(full.lengths)  # episodes that end before the cut, and past it
    assert cut.lengths == [min(n, 12) for n in full.lengths]
    assert cut.returns == [float(n) for n in cut.lengths]


def eval_json(run: Path, out: Path) -> dict:
    result = json.loads(out.read_text())
    assert result["episodes"] == 20 and len(result["returns"]) == 20 and len(result["lengths"]) == 20
    assert result["seeds"] == list(range(10_000, 10_020))  # the learners' evaluation seeds (run.seed 0)
    lo, hi = result["ci95"]
    assert lo <= result["mean"] <= hi and min(result["returns"]) <= result["median"] <= max(result["returns"])
    return result


def assert_video(path: Path, frames_at_least: int) -> None:
    cv2 = pytest.importorskip("cv2")
    assert path.is_file() and path.stat().st_size > 0, path
    cap = cv2.VideoCapture(str(path))
    try:
        ok, frame = cap.read()
        assert ok and frame.ndim == 3 and frame.shape[2] == 3 and frame.max() > 0, path  # a picture, not black
        assert cap.get(cv2.CAP_PROP_FRAME_COUNT) >= frames_at_least
    finally:
        cap.release()


@pytest.mark.timeout(120)
def test_cartpole_eval_20_episodes_with_a_video(runs, tmp_path, capsys):
    pytest.importorskip("pygame")  # classic control draws its frames with it (the video extra)
    run = runs["cartpole"]
    assert console(["eval", str(run), "--episodes", "20", "--video", str(tmp_path / "v"), "--video-episodes", "2"]) == 0
    out = capsys.readouterr()
    result = eval_json(run, run / "eval.json")
    frames = result["trained"]["env_frames"]
    assert frames > 0 and result["trained"]["updates"] > 0
    line = f"[eval] CartPole-v1, 20 episodes, best checkpoint ({frames:,} frames), greedy: mean"
    assert "20/20 episodes" in out.err and line in out.out
    assert result["policy"] == "greedy" and result["checkpoint"] == "best"
    assert result["lengths"] == [int(r) for r in result["returns"]]  # CartPole: +1 a step
    assert result["videos"] == [str(tmp_path / "v" / f"episode-00{i}.mp4") for i in range(2)]
    for i, video in enumerate(result["videos"]):
        assert_video(Path(video), frames_at_least=result["lengths"][i])


@pytest.mark.timeout(120)
def test_the_last_checkpoint_plays_the_games_summary_json_scored(impala_debug_run, tmp_path, capsys):
    """The learners' own evaluation is the same player: the last checkpoint, the learners' seeds and episode
    count give ``summary.json``'s final figure (impala evaluates on gymnasium's env, as distrl eval does)."""
    run = impala_debug_run
    summary, cfg = (json.loads((run / f).read_text()) for f in ("summary.json", "config.json"))
    argv = ["eval", str(run), "--checkpoint", "last", "--episodes", str(cfg["run"]["eval_episodes"])]
    assert console([*argv, "--out", str(tmp_path / "last.json")]) == 0
    result = json.loads((tmp_path / "last.json").read_text())
    assert result["mean"] == pytest.approx(summary["eval_return_mean"])
    # an env with no renderer: --video says so before anything plays
    capsys.readouterr()
    err = one_line_exit_2([*argv, "--video", str(tmp_path / "v")], capsys)
    assert "renders no frames" in err and not (tmp_path / "v").exists()


@pytest.mark.timeout(120)
def test_minatar_eval_20_episodes_sampling_with_a_video(runs, tmp_path, capsys):
    run = runs["minatar"]
    out = tmp_path / "eval.json"
    argv = [
        "eval",
        str(run),
        "--episodes",
        "20",
        "--policy",
        "sample",
        "--video",
        str(tmp_path / "v"),
        "--out",
        str(out),
    ]
    assert console(argv) == 0
    result = eval_json(run, out)
    assert result["policy"] == "sample" and len(result["videos"]) == 3  # --video-episodes' default
    assert_video(Path(result["videos"][0]), frames_at_least=result["lengths"][0])
    assert result["sticky_actions"] is None  # the package's 0.1


def test_minatar_sticky_actions_reach_the_package_and_other_ids_refuse(runs, tmp_path, capsys):
    """``--sticky-actions 0``: gymnax's MinAtar had none; the package's ``sticky_action_prob`` is
    set on every env played (``make_env(minatar_sticky=)``); an id with no sticky actions refuses."""
    from distrl.envs.gym import make_env

    assert make_env("MinAtar/Breakout-v1").unwrapped.game.sticky_action_prob == 0.1
    assert make_env("MinAtar/Breakout-v1", minatar_sticky=0.0).unwrapped.game.sticky_action_prob == 0.0
    out = tmp_path / "eval.json"
    assert console(["eval", str(runs["minatar"]), "--episodes", "2", "--sticky-actions", "0", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["sticky_actions"] == 0.0
    capsys.readouterr()
    err = one_line_exit_2(["eval", str(runs["cartpole"]), "--sticky-actions", "0"], capsys)
    assert "is for ALE/* and MinAtar/* ids, not CartPole-v1" in err


@pytest.mark.timeout(180)
def test_mujoco_eval_20_episodes_with_a_video(runs, tmp_path, jobs):
    """In its own process: MuJoCo picks its GL backend when first imported, and this one's has none."""
    run = runs["mujoco"]
    cmd = [
        sys.executable,
        "-m",
        "distrl.studies.evaluate",
        str(run),
        "--episodes",
        "20",
        "--video",
        str(tmp_path / "v"),
        "--video-episodes",  # one: EGL renders on the CPU here (three videos: 40 s a test; one: 17 s)
        "1",
    ]
    job = jobs.start(cmd, env=child_env(MUJOCO_GL="egl"))
    assert job.wait(150) == 0, job.tail()
    assert "[eval] InvertedPendulum-v5, 20 episodes" in job.stdout
    result = eval_json(run, run / "eval.json")
    assert len(result["videos"]) == 1
    assert_video(Path(result["videos"][0]), frames_at_least=result["lengths"][0])


#: run in a fresh interpreter: torch alone loads the programs and plays the observations
LOAD_WITHOUT_DISTRL = """
import json, sys, torch
for name in sys.argv[1:]:
    info = {"distrl.json": ""}
    policy = torch.export.load(name + ".pt2", extra_files=info).module()
    obs = torch.load(name + ".obs.pt")
    assert json.loads(info["distrl.json"])["obs_shape"] == list(obs.shape[1:])
    torch.save(policy(obs), name + ".actions.pt")
assert not [m for m in sys.modules if m.split(".")[0] == "distrl"], "distrl was imported"
"""


@pytest.mark.timeout(240)
def test_the_exported_program_plays_as_load_policy_without_distrl(runs, tmp_path, jobs):
    from distrl.envs.gym import as_obs, make_env
    from distrl.nn.trained_policy import load_policy

    names, discrete = [], {}
    for name, run in runs.items():
        env = make_env(RUNS[name][0])
        env.action_space.seed(0)
        discrete[name] = getattr(env.action_space, "n", None)
        obs, rows = env.reset(seed=0)[0], []
        for _ in range(64):  # states the env visits under random play
            rows.append(obs)
            obs, _, term, trunc, _ = env.step(env.action_space.sample())
            if term or trunc:
                obs = env.reset()[0]
        env.close()
        base = tmp_path / name
        assert console(["export-policy", str(run), f"{base}.pt2", "--format", "pt2"]) == 0
        torch.save(as_obs(np.stack(rows)), f"{base}.obs.pt")
        names.append(str(base))
    job = jobs.start([sys.executable, "-c", LOAD_WITHOUT_DISTRL, *names], cwd=tmp_path, env=child_env(PYTHONPATH=""))
    assert job.wait(120) == 0, job.tail()
    for name, base in zip(runs, names):
        obs, got = torch.load(f"{base}.obs.pt"), torch.load(f"{base}.actions.pt")
        n = discrete[name]
        actor = load_policy(runs[name], action_spec=Categorical(n) if n else None)  # greedy; indices as the program's
        want = actor(TensorDict({actor.in_keys[0]: obs}, batch_size=[len(obs)]))["action"]
        if n:
            assert got.dtype == torch.int64 and torch.equal(got, want), name
        else:
            assert got.shape == want.shape and torch.allclose(got, want, atol=1e-6), name


@pytest.mark.timeout(120)
def test_a_masked_run_plays_legal_actions_only(tmp_path, in_process, capsys):
    """An action-masked run (the mask folded into the observation by distrl's env) is played with its mask:
    no episode of the toy env ends early on an illegal action, and the learners' figure comes back."""
    run = tmp_path / "masked"
    argv = ["impala", "--experiment", "debug", "--env", "distrl/MaskedPick-v0", "--run-dir", str(run)]
    assert in_process([*argv, "--set", "run.logger=none"]) == 0
    summary, cfg = (json.loads((run / f).read_text()) for f in ("summary.json", "config.json"))
    n = cfg["run"]["eval_episodes"]
    for policy in ("greedy", "sample"):
        out = tmp_path / f"{policy}.json"
        assert (
            console(
                ["eval", str(run), "--checkpoint", "last", "--episodes", str(n), "--policy", policy, "--out", str(out)]
            )
            == 0
        )
        result = json.loads(out.read_text())
        assert result["lengths"] == [20] * n, result  # an illegal action ends the episode at once
        if policy == "greedy":
            assert result["mean"] == pytest.approx(summary["eval_return_mean"])


def fake_run(tmp_path, recipe: str, env: str, build) -> Path:
    """A run directory as a learner leaves it, with the random weights of ``build(cfg)``: no training."""
    from distrl.cli.options import experiment_config
    from distrl.config import override
    from distrl.runtime.checkpoint import save_checkpoint

    cfg = override(experiment_config(recipe, "debug"), **{"run.env": env})
    model, network = build(cfg)
    run = tmp_path / recipe
    run.mkdir()
    (run / "config.json").write_text(cfg.to_json())
    save_checkpoint(run, 1, {"model": model.state_dict(), "config": cfg.to_dict(), "policy_network": network})
    return run


@pytest.mark.parametrize("kind", ["atari_nature", "apex_q", "apex_sac"])
def test_the_program_of_every_network_plays_as_load_policy(tmp_path, kind):
    """Without training: an Atari-shaped actor-critic (uint8 frames, the Nature CNN), an Ape-X Q-network
    and a SAC policy (a box) exported as programs act as load_policy's greedy actors, at any batch size."""
    import dataclasses

    from distrl.nn.export import export_program
    from distrl.nn.models import ActorCritic, QNetwork
    from distrl.nn.sac import SACNetwork
    from distrl.nn.trained_policy import load_policy

    torch.manual_seed(0)
    if kind == "atari_nature":
        pytest.importorskip("ale_py")

        def build(cfg):
            net = dataclasses.replace(cfg.net, encoder="nature")
            return ActorCritic((4, 84, 84), 6, net), "actor_critic"

        run = fake_run(tmp_path, "impala", "ALE/Pong-v5", build)
        obs, spec = torch.randint(0, 256, (5, 4, 84, 84), dtype=torch.uint8), Categorical(6)
    elif kind == "apex_q":
        run = fake_run(
            tmp_path, "apex", "CartPole-v1", lambda cfg: (QNetwork(4, 2, cfg.net, cfg.algo.dueling), "q_network")
        )
        obs, spec = torch.randn(5, 4), Categorical(2)
    else:
        box = torch.tensor([-2.0]), torch.tensor([2.0])
        run = fake_run(tmp_path, "apex", "Pendulum-v1", lambda cfg: (SACNetwork(3, 1, *box, cfg.net), "sac"))
        obs, spec = torch.randn(5, 3), None
    program = torch.export.load(export_program(run, tmp_path / "p.pt2")).module()
    actor = load_policy(run, action_spec=spec)
    want = actor(TensorDict({actor.in_keys[0]: obs}, batch_size=[len(obs)]))["action"]
    for rows in (slice(0, 5), slice(0, 1)):  # the batch dimension is dynamic
        got = program(obs[rows])
        assert got.shape == want[rows].shape and torch.allclose(got.float(), want[rows].float(), atol=1e-5), kind
