"""Stable-Baselines3's SAC as the peer on the same machine for ``apex``'s SAC on MuJoCo: trained for
a wall-clock budget, every checkpoint scored afterwards as distrl scores its own runs, for
``docs/continuous.md`` to set beside ``apex`` at equal minutes.

    python -m experiments.sb3_sac --env HalfCheetah-v5 --budget-s 1800 --seed 0 --out runs/sb3_sac/halfcheetah_s0
        [--eval-every-s 120] [--eval-episodes 10] [--venv .venv-sb3] [--eval-only]

SB3 lives in a venv of its own (:data:`MAKE_VENV`), made with ``--system-site-packages`` so that it
reuses this environment's torch, gymnasium, mujoco and distrl: stable-baselines3 2.9.2 asks for
torch >= 2.8 and gymnasium >= 0.29.1, < 2.0, so pip adds it alone and replaces nothing. The script
starts in distrl's environment and runs itself again with the venv's python (:func:`main`).

Hyperparameters: rl-zoo3's ``hyperparams/sac.yml`` (DLR-RM/rl-baselines3-zoo at commit
22e3ff2450fd92033f7f032915e1f64894a09584; the file last changed in eec15dc22e1e). It has no ``-v5``
entries: ``HalfCheetah-v4: &mujoco-defaults`` and ``Hopper-v4: <<: *mujoco-defaults`` are used for
the ``-v5`` ids (the zoo's own ``train.py`` would take its ``default`` entry for a ``-v5`` id, and
with it SB3's ``learning_starts`` of 100). Everything the entry leaves out is SB3 2.9.2's default:

    setting                          value                                 source
    n_timesteps                      1e6 (learn()'s total; the budget      sac.yml
                                     ends the run first)
    policy                           MlpPolicy                             sac.yml
    learning_starts                  10,000 uniform random steps first     sac.yml
    learning_rate                    3e-4, constant                        SB3 SAC default
    buffer_size                      1,000,000                             SB3 SAC default
    batch_size                       256                                   SB3 SAC default
    tau, gamma                       0.005, 0.99                           SB3 SAC default
    train_freq, gradient_steps       1, 1 (one update per env step)        SB3 SAC default
    ent_coef, target_entropy         auto (from 1.0), -|A|                 SB3 SAC default
    target_update_interval           1                                     SB3 SAC default
    use_sde                          False                                 SB3 SAC default
    net_arch, activation_fn          256-256 actor and twin critics, ReLU  SB3 SACPolicy default
    envs, normalisation              1 env, none                           sac.yml (no n_envs, no normalize)

What this machine changes: one torch thread (``torch.set_num_threads(1)``, ``OMP_NUM_THREADS=1``),
as every distrl process on these 2 cores has, and the CPU as device.

Budget: the clock starts as SB3's ``learn`` begins (after the env's first reset), and the run stops
at the first env step past ``--budget-s`` (the callback returns False). Every ``--eval-every-s``
and at the stop the model is saved (``model.save``: policy, critics, optimisers, not the replay) as
``OUT/checkpoints/sac_{env_steps:08d}_{wall_s:07.1f}s.zip`` (:func:`checkpoint_name`).

Evaluation, after training (so it takes no CPU from it; ``--eval-only`` scores an earlier run):
each checkpoint's ``predict(deterministic=True)`` (the tanh of the mean scaled to the box, the
action distrl's SAC evaluates) plays ``--eval-episodes`` whole episodes through distrl's own
player, :func:`distrl.envs.gym.play_episodes` (``gym.make(env)``, its 1,000-step limit, episode
``i`` reset with seed ``10_000 + i``: distrl's evaluation seeds for run seed 0, and what
``distrl eval RUN --seed 10000`` plays for any run). ``OUT/results.json`` holds the run's
description and one record per checkpoint (:func:`record`).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shlex
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from distrl.envs.gym import play_episodes

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_VENV = ROOT / ".venv-sb3"
SB3 = "stable-baselines3==2.9.2"
MAKE_VENV = f"python -m venv --system-site-packages {{venv}} && {{venv}}/bin/pip install {SB3}"
ZOO = "DLR-RM/rl-baselines3-zoo@22e3ff2450fd92033f7f032915e1f64894a09584:hyperparams/sac.yml"
_MUJOCO = {"n_timesteps": 1e6, "policy": "MlpPolicy", "learning_starts": 10_000}  # &mujoco-defaults
ZOO_SAC = {"HalfCheetah-v4": _MUJOCO, "Hopper-v4": _MUJOCO}  #: the entries of :data:`ZOO` used here
#: what the run's model holds, recorded in results.json against the docstring's table
SETTINGS = ("learning_rate", "buffer_size", "learning_starts", "batch_size", "tau", "gamma", "train_freq")
SETTINGS += ("gradient_steps", "ent_coef", "target_entropy", "target_update_interval", "use_sde")
EVAL_SEED = 10_000  #: episode i plays from this + i, as distrl's evaluations of run seed 0 do
_NAME = re.compile(r"sac_(\d+)_(\d+\.\d)s\.zip$")


@dataclass(frozen=True)
class LinearSchedule:
    """rl-zoo3's ``lin_X`` (its ``SimpleLinearSchedule``): ``X`` times SB3's progress remaining,
    1 at the first step and 0 at ``n_timesteps``."""

    initial: float

    def __call__(self, progress_remaining: float) -> float:
        return progress_remaining * self.initial


def zoo_value(value):
    """A ``sac.yml`` value as SB3 takes it: ``"lin_7.3e-4"`` -> :class:`LinearSchedule`, as the zoo's
    ``_preprocess_schedules`` does; anything else as it is (the YAML's ``!!float 1e6`` is a float)."""
    if isinstance(value, str) and value.startswith("lin_"):
        return LinearSchedule(float(value.removeprefix("lin_")))
    return value


def zoo_entry(env_id: str) -> tuple[str, dict]:
    """``(sac.yml key, entry)`` for ``env_id``: its own entry, else that of the ``-v4`` of a ``-v5`` id."""
    for key in (env_id, re.sub(r"-v5$", "-v4", env_id)):
        if key in ZOO_SAC:
            return key, dict(ZOO_SAC[key])
    raise ValueError(f"no rl-zoo3 SAC entry for {env_id} here: one of {', '.join(ZOO_SAC)} (or its -v5)")


def sac_kwargs(entry: dict) -> dict:
    """SB3 ``SAC``'s keyword arguments from a zoo entry: all of it but ``policy`` (SAC's first
    argument) and ``n_timesteps`` (``learn``'s)."""
    return {k: zoo_value(v) for k, v in entry.items() if k not in ("policy", "n_timesteps")}


def checkpoint_name(env_steps: int, wall_s: float) -> str:
    """``sac_00012345_00060.2s.zip``: names sort by env steps, and say what a record needs."""
    return f"sac_{env_steps:08d}_{wall_s:07.1f}s.zip"


def checkpoint_info(name: str | Path) -> tuple[int, float]:
    """``(env steps, wall s)`` of a checkpoint named by :func:`checkpoint_name`."""
    m = _NAME.search(str(name))
    if m is None:
        raise ValueError(f"{name} is not a checkpoint of experiments.sb3_sac")
    return int(m.group(1)), float(m.group(2))


class Clock:
    """When a run saves and stops: ``every_s`` and ``budget_s`` of wall time from :meth:`start`."""

    def __init__(self, budget_s: float, every_s: float):
        if budget_s <= 0 or every_s <= 0:
            raise ValueError(f"budget ({budget_s} s) and save interval ({every_s} s) must be positive")
        self.budget_s, self.every_s, self.started, self.saves = budget_s, every_s, 0.0, 0

    def start(self, now: float) -> None:
        self.started = now

    def tick(self, now: float) -> tuple[bool, bool]:
        """``(save, stop)`` at ``now``: a save each time a multiple of ``every_s`` is passed (one
        for several passed at once), and one at the stop, the first tick past the budget."""
        elapsed = now - self.started
        due, stop = int(elapsed // self.every_s), elapsed >= self.budget_s
        save, self.saves = stop or due > self.saves, max(due, self.saves)
        return save, stop


def record(name: str, returns: list[float]) -> dict:
    """A checkpoint's line of ``results.json``: its time, its env steps, its episodes' returns."""
    env_steps, wall_s = checkpoint_info(name)
    mean, median = statistics.fmean(returns), statistics.median(returns)
    return {
        "checkpoint": name,
        "wall_s": wall_s,
        "env_steps": env_steps,
        "mean": mean,
        "median": median,
        "returns": returns,
    }


def line(r: dict) -> str:
    """A record as the line printed for it."""
    return (
        f"{r['wall_s']:7.1f} s {r['env_steps']:>10,} env steps: mean {r['mean']:9.1f}  median {r['median']:9.1f}  "
        f"({len(r['returns'])} episodes)"
    )


def default_out(env_id: str, seed: int) -> Path:
    """``runs/sb3_sac/halfcheetah_s0`` for ``HalfCheetah-v5``, seed 0."""
    return ROOT / "runs" / "sb3_sac" / f"{env_id.split('-')[0].lower()}_s{seed}"


def train(args: argparse.Namespace, out: Path) -> dict:
    """Train SB3's SAC on ``args.env`` until ``args.budget_s`` (:class:`Clock`), saving into
    ``out/checkpoints``; returns the run's description for ``results.json``."""
    # SB3 is imported in its venv only: distrl's environment never has it (module docstring)
    import stable_baselines3
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback

    key, entry = zoo_entry(args.env)
    clock, folder = Clock(args.budget_s, args.eval_every_s), out / "checkpoints"

    class Saver(BaseCallback):
        """Saves on the clock's schedule; returning False at the budget ends ``learn``."""

        saved_steps = -1

        def _on_training_start(self) -> None:
            clock.start(time.monotonic())

        def _on_step(self) -> bool:
            now = time.monotonic()
            save, stop = clock.tick(now)
            if save:
                self.save(now - clock.started)
            return not stop

        def _on_training_end(self) -> None:
            if self.saved_steps != self.model.num_timesteps:  # n_timesteps came before the budget
                self.save(time.monotonic() - clock.started)

        def save(self, wall_s: float) -> None:
            steps = self.model.num_timesteps
            self.model.save(folder / checkpoint_name(steps, wall_s))
            self.saved_steps = steps
            print(f"{wall_s:7.1f} s {steps:>10,} env steps ({steps / wall_s:,.0f}/s): saved", flush=True)

    folder.mkdir(parents=True, exist_ok=True)
    model = SAC(entry["policy"], args.env, seed=args.seed, device="cpu", **sac_kwargs(entry))
    print(f"SB3 {stable_baselines3.__version__} SAC on {args.env} for {args.budget_s:g} s ({key} of {ZOO})", flush=True)
    start = time.monotonic()
    model.learn(total_timesteps=int(entry["n_timesteps"]), callback=Saver())
    return {
        "command": shlex.join(["python", "-m", "experiments.sb3_sac", *sys.argv[1:]]),
        "env": args.env,
        "seed": args.seed,
        "budget_s": args.budget_s,
        "eval_every_s": args.eval_every_s,
        "zoo": {"source": f"{ZOO} ({key})", **entry},
        "sb3_settings": {k: getattr(model, k) for k in SETTINGS} | {"net_arch": model.policy.net_arch},
        "torch_threads": torch.get_num_threads(),
        "versions": {"stable_baselines3": stable_baselines3.__version__, "torch": torch.__version__},
        "train_wall_s": round(time.monotonic() - start, 1),  # learn's whole call
        "env_steps": model.num_timesteps,
    }


def score(args: argparse.Namespace, out: Path, results: dict) -> None:
    """Evaluate every checkpoint in ``out/checkpoints`` (module docstring), adding each record to
    ``results`` and ``OUT/results.json`` as it comes; print the table at the end."""
    from stable_baselines3 import SAC  # the venv only, as in train()

    paths = sorted((out / "checkpoints").glob("sac_*.zip"), key=checkpoint_info)
    if not paths:
        sys.exit(f"no checkpoint under {out / 'checkpoints'}")
    results["eval"] = {"episodes": args.eval_episodes, "seeds": f"{EVAL_SEED} + i", "policy": "deterministic"}
    results["checkpoints"] = []
    for path in paths:
        model = SAC.load(path, device="cpu")
        act = lambda obs: torch.as_tensor(model.predict(obs.numpy(), deterministic=True)[0])  # [B, *F] -> [B, A]
        played = play_episodes(act, results["env"], args.eval_episodes, EVAL_SEED)
        results["checkpoints"].append(record(path.name, played.returns))
        (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    print(f"SB3 SAC on {results['env']}, seed {results['seed']}: deterministic policy, {args.eval_episodes} episodes")
    print("\n".join(line(r) for r in results["checkpoints"]) + f"\n{out / 'results.json'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", default="HalfCheetah-v5", help=f"a MuJoCo id: {', '.join(ZOO_SAC)} or its -v5")
    ap.add_argument("--budget-s", type=float, default=1800.0, help="wall time of training from learn's start")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="default: runs/sb3_sac/<env>_s<seed>")
    ap.add_argument("--eval-every-s", type=float, default=120.0, help="wall time between checkpoints")
    ap.add_argument("--eval-episodes", type=int, default=10, help="whole episodes per checkpoint")
    ap.add_argument("--venv", type=Path, default=DEFAULT_VENV, help="the venv SB3 is installed in")
    ap.add_argument("--eval-only", action="store_true", help="score the checkpoints of an earlier run in --out")
    args = ap.parse_args()
    try:
        zoo_entry(args.env)  # an env with no entry fails here, before any venv is started
    except ValueError as e:
        ap.error(str(e))
    venv = args.venv.resolve()
    if Path(sys.prefix).resolve() != venv:  # distrl's environment: run again in SB3's venv
        python = venv / "bin" / "python"
        if not python.exists():
            sys.exit(f"SB3 venv {venv} is missing; make it with: {MAKE_VENV.format(venv=venv)}")
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
        os.execve(python, [str(python), "-m", "experiments.sb3_sac", *sys.argv[1:]], env)
    if importlib.util.find_spec("stable_baselines3") is None:
        sys.exit(f"{venv} has no stable_baselines3; remake it with: {MAKE_VENV.format(venv=venv)}")
    torch.set_num_threads(1)
    out = (args.out or default_out(args.env, args.seed)).resolve()
    results_path = out / "results.json"
    if args.eval_only:
        if not results_path.exists():
            sys.exit(f"--eval-only: no earlier run in {out} ({results_path.name} is missing)")
        results = json.loads(results_path.read_text())
    else:
        out.mkdir(parents=True, exist_ok=True)
        results = train(args, out)
        results_path.write_text(json.dumps(results, indent=1, default=str))  # --eval-only starts from here
    score(args, out, results)


if __name__ == "__main__":
    main()
