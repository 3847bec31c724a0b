"""Sample Factory 2 as a learning peer on Atari: its Atari example trained for a wall-clock budget,
every checkpoint scored by distrl's full-game evaluation, for ``docs/atari.md`` to set beside
distrl's runs at equal minutes and equal agent steps.

    python -m experiments.sf2_learn [--env ALE/Pong-v5] [--budget-s 3600] [--seed 0] [--workers 2]
        [--layout NAME] [--checkpoint-every-s 300] [--eval-games 10] [--sticky-actions 0.25]
        [--out runs/sf2_learn/pong_seed0] [--venv .venv-sf2] [--eval-only]

Training (``experiments/sf2_child.py``, in SF2's venv: :data:`experiments.sf2_atari.MAKE_VENV`
makes it): SF2 2.1.1's ``sf_examples.atari`` with its ``atari_params.py`` defaults (sync PPO,
rollouts of 128, 4 epochs of 4 batches of 256, lr 2.5e-4 decayed linearly, the Nature CNN, inputs
normalised in the model) and its own wrappers (30 no-ops, max-and-skip 4, episodic life, FIRE at
reset, clipped rewards, 84x84 grayscale, a stack of 4) on the ``-v5`` game with frame skip 1 below
them and sticky actions ``--sticky-actions``, CPU only; only the layout is this machine's
(``--workers``, ``--layout`` of :data:`experiments.sf2_atari.LAYOUTS`). Episodic life stays on in
training, as in SF2's example (distrl's ``atari.episodic_life`` is off by default); evaluation
never uses it. SF2's own stop at ``train_for_env_steps`` (10M frames = 2.5M agent steps) stays;
``--budget-s`` is counted from its first trained batch, and SIGINT ends it
(:func:`experiments.sf2_atari.supervise`: SF2 never checks ``--train_for_seconds``), its learner
saving a last checkpoint. Every ``--checkpoint-every-s`` SF2 saves one, and keeps them all.

Evaluation, after training (so it takes no CPU from it): each checkpoint plays ``--eval-games``
whole games as ``experiments/eval_atari.py`` plays distrl's (every life, unclipped score, sticky
actions, epsilon-greedy at ``atari.eval_epsilon`` over the most likely action, game ``i`` seeded
``10_000 + i``). ``OUT/results.json`` holds one record per checkpoint: ``wall_s`` (from SF2's first
trained batch to the checkpoint's save, as distrl's ``--max-time-s`` counts from its learner's
start), ``since_launch_s``, ``agent_steps`` (SF2's trained env frames / frameskip 4), the scores.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from distrl.config import AtariConfig
from experiments import sf2_atari

CHILD = "experiments.sf2_child"
EXPERIMENT = "learn"  #: SF2's experiment name: its files are under OUT/sf2/learn/
KEEP = 1_000_000  #: SF2's --keep_checkpoints: every checkpoint stays
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SAVED = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]\[\d+\] Saving \S*?(checkpoint_\d+_\d+\.pth)")
_NAME = re.compile(r"checkpoint_(\d+)_(\d+)\.pth$")


def rom(env_id: str) -> str:
    """The ROM's name in ale-py 0.8.1's ``ale_py.roms``: ``ALE/Pong-v5`` -> ``Pong``."""
    return env_id.split("/")[-1].split("-")[0]


def sf2_env(env_id: str) -> str:
    """SF2's (and gymnasium's, in the child) name of the training env: ``ALE/Pong-v5`` -> ``atari_pong_v5``."""
    return "atari_" + env_id.split("/")[-1].replace("-", "_").lower()


def default_out(env_id: str, seed: int) -> Path:
    """``runs/sf2_learn/pong_seed0`` for ``ALE/Pong-v5``, seed 0."""
    return sf2_atari.ROOT / "runs" / "sf2_learn" / f"{rom(env_id).lower()}_seed{seed}"


def checkpoint_steps(name: str) -> tuple[int, int]:
    """``(SF2's train step, trained env frames)`` of a checkpoint file named
    ``checkpoint_{train_step:09d}_{env_steps}.pth`` (SF2's ``Learner._save_impl``)."""
    m = _NAME.search(name)
    if m is None:
        raise ValueError(f"{name} is not an SF2 checkpoint name")
    return int(m.group(1)), int(m.group(2))


def _unix(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def saved_at(log: str) -> dict[str, float]:
    """Checkpoint file name -> unix time of its ``Saving ...`` line in an SF2 log."""
    return {m.group(2): _unix(m.group(1)) for m in _SAVED.finditer(_ANSI.sub("", log))}


def first_batch_at(log: str) -> float | None:
    """Unix time of the first report with trained frames in an SF2 log (what the budget counts from)."""
    return next((t for t, frames, _ in sf2_atari.parse_reports(log) if frames), None)


def train_command(
    venv: Path, train_dir: Path, env_id: str, seed: int, workers: int, layout: str, sticky: float, every_s: int
) -> list[str]:
    """SF2's Atari example through the child on ``env_id``, this layout, saving every ``every_s``."""
    envs, splits, extra = sf2_atari.LAYOUTS[layout]
    extra = (*extra, "--seed", str(seed), "--ale_id", env_id, "--sticky_actions", str(sticky))
    return sf2_atari.command(
        venv,
        train_dir,
        workers,
        envs,
        splits,
        extra,
        module=CHILD,
        env=sf2_env(env_id),
        experiment=EXPERIMENT,
        save_every_s=every_s,
        keep_checkpoints=KEEP,
    )


def record(name: str, saved: float, first_batch: float, launch: float, evaluation: dict) -> dict:
    """One checkpoint's line of ``results.json``: its times, its counts, its scores."""
    train_step, frames = checkpoint_steps(name)
    keep = ("scores", "mean", "median", "min", "max")
    return {
        "checkpoint": name,
        "wall_s": round(saved - first_batch, 1),
        "since_launch_s": round(saved - launch, 1),
        "train_step": train_step,
        "env_frames": frames,
        "agent_steps": frames // sf2_atari.FRAMESKIP,
        **{k: evaluation[k] for k in keep},
    }


def line(r: dict) -> str:
    """A record as the one line printed for it."""
    return (
        f"{r['checkpoint']}: {r['wall_s']:7.1f} s, {r['agent_steps']:>10,} agent steps: mean {r['mean']:6.2f}  "
        f"median {r['median']:6.1f}  min {r['min']:5.1f}  max {r['max']:5.1f}  ({len(r['scores'])} games)"
    )


def evaluations(venv: Path, config: Path, checkpoints: list[Path], games: int, epsilon: float, log: Path):
    """The child's evaluation of each checkpoint, as they come: first ``{"versions": ...}``."""
    cmd = [str(venv / "bin" / "python"), "-m", CHILD, "eval", str(config), *map(str, checkpoints)]
    cmd += ["--games", str(games), "--epsilon", str(epsilon)]
    with open(log, "w") as err:
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, cwd=sf2_atari.ROOT, env=env)
        yield from (json.loads(out) for out in proc.stdout)
    if proc.wait():
        tail = log.read_text(errors="replace").strip().splitlines()[-8:]
        raise RuntimeError("SF2's evaluation failed:\n" + "\n".join(tail))


def train(args: argparse.Namespace, out: Path) -> dict:
    """Train SF2 for ``args.budget_s`` from its first batch; the run's description for ``results.json``."""
    out.mkdir(parents=True, exist_ok=True)
    layout = (args.workers, args.layout, args.sticky_actions, args.checkpoint_every_s)
    cmd = train_command(args.venv, out / "sf2", args.env, args.seed, *layout)
    launch = time.time()
    print(f"training SF2 on {args.env} for {args.budget_s:g} s from its first batch; log {out / 'sf2.log'}", flush=True)
    wall = sf2_atari.supervise(cmd, out / "sf2.log", args.budget_s, grace_s=60.0)  # the learner saves on SIGINT
    return {
        "command": shlex.join(["python", "-m", "experiments.sf2_learn", *sys.argv[1:]]),
        "sf2_command": shlex.join(cmd),
        "env": args.env,
        "seed": args.seed,
        "layout": args.layout,
        "workers": args.workers,
        "budget_s": args.budget_s,
        "training": {"sticky_actions": args.sticky_actions, "episodic_life": True, "reward_clipping": True},
        "launch_unix": launch,
        "train_wall_s": round(wall, 1),
    }


def score(args: argparse.Namespace, out: Path, results: dict, epsilon: float) -> None:
    """Evaluate every checkpoint of the run in ``out``, adding each record to ``results`` and
    ``OUT/results.json`` as it comes, and printing its line."""
    log_path, results_path = out / "sf2.log", out / "results.json"
    log = log_path.read_text(errors="replace")
    first_batch, saves = first_batch_at(log), saved_at(log)
    if first_batch is None:
        sys.exit(f"SF2 trained no batch; the end of its log {log_path}:\n" + "\n".join(log.splitlines()[-8:]))
    run_dir = out / "sf2" / EXPERIMENT
    checkpoints = sorted(run_dir.glob("checkpoint_p0/checkpoint_*_*.pth"), key=lambda p: checkpoint_steps(p.name))
    if not checkpoints:
        sys.exit(f"SF2 saved no checkpoint under {run_dir}; its log: {log_path}")
    results["startup_s"] = round(first_batch - results["launch_unix"], 1)  # launch to first trained batch
    results["eval"] = {"games": args.eval_games, "epsilon": epsilon, "seeds": "10_000 + game"}
    results["checkpoints"] = []
    config = run_dir / "config.json"
    for evaluation in evaluations(args.venv, config, checkpoints, args.eval_games, epsilon, out / "eval.log"):
        if "versions" in evaluation:
            results["versions"] = evaluation["versions"]
            continue
        path = Path(evaluation["checkpoint"])
        saved = saves.get(path.name) or path.stat().st_mtime
        r = record(path.name, saved, first_batch, results["launch_unix"], evaluation)
        results["checkpoints"].append(r)
        results_path.write_text(json.dumps(results, indent=1))
        print(line(r), flush=True)
    print(f"{len(results['checkpoints'])} checkpoints evaluated: {results_path}")


def main() -> None:
    atari = AtariConfig()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", default="ALE/Pong-v5", help="an ALE -v5 id whose ROM the venv has")
    ap.add_argument("--budget-s", type=float, default=3600.0, help="wall time from SF2's first trained batch")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)), help="SF2 rollout workers")
    ap.add_argument("--layout", choices=list(sf2_atari.LAYOUTS), default=next(iter(sf2_atari.LAYOUTS)))
    ap.add_argument("--checkpoint-every-s", type=int, default=300, help="SF2's --save_every_sec")
    ap.add_argument("--eval-games", type=int, default=10, help="whole games per checkpoint")
    ap.add_argument("--sticky-actions", type=float, default=atari.sticky_actions)
    ap.add_argument("--out", type=Path, default=None, help="default: runs/sf2_learn/<game>_seed<N>")
    ap.add_argument("--venv", type=Path, default=sf2_atari.DEFAULT_VENV, help="the venv SF2 is installed in")
    ap.add_argument("--eval-only", action="store_true", help="score the checkpoints of an earlier run in --out")
    args = ap.parse_args()
    out = (args.out or default_out(args.env, args.seed)).resolve()
    results_path, results = out / "results.json", None
    if args.eval_only:
        if not results_path.exists():
            sys.exit(f"--eval-only: no earlier run in {out} ({results_path.name} is missing)")
        results = json.loads(results_path.read_text())
    why = sf2_atari.missing(args.venv, rom(results["env"] if results else args.env))
    if why:
        sys.exit(why)
    if results is None:
        results = train(args, out)
        results_path.write_text(json.dumps(results, indent=1))  # --eval-only starts from here
    score(args, out, results, atari.eval_epsilon)


if __name__ == "__main__":
    main()
