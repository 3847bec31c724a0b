"""Sample Factory 2 itself on Pong, for ``experiments/bench_atari.py``: its Atari example
(``sf_examples.atari.train_atari``, env ``atari_pong``) with its Atari defaults, run in a venv of
its own for a fixed wall time, its throughput read back from its log.

    python -m experiments.sf2_atari [--seconds 60] [--workers 2] [--layout NAME] [--venv .venv-sf2]

SF2 2.1.1 needs gymnasium < 1.0 and numpy < 2, so it cannot live in distrl's environment; make the
venv once (:data:`MAKE_VENV`; ale-py 0.8.1 is what resolves beside gymnasium 0.29, and it ships no
ROMs, so Pong's and Breakout's are imported from the ale-py of distrl's environment).

What is run: ``atari_pong`` is ``PongNoFrameskip-v4`` (no sticky actions) behind SF2's wrappers
(30 no-ops, max-and-skip 4, episodic life, FIRE at reset, clipped rewards, 84x84 grayscale,
a stack of 4), the Nature CNN (``convnet_atari``), PPO settings of its ``atari_params.py``
(``async_rl=False``, rollouts of 128, 4 epochs of 4 batches of 256), CPU only. Only the layout is
this machine's: ``--workers`` rollout workers, and ``--layout`` (:data:`LAYOUTS`): the Atari
defaults' one env a worker; 16 envs in 2 double-buffered groups with ``async_rl`` (SF2's own
defaults outside its Atari preset; its help advises 10-30 envs a worker for Atari throughput; sync
mode refuses 16 envs with these batch sizes); the same with one epoch (each sample trained on
once, as distrl's ``sf`` does, instead of the Atari preset's 4).

Timing: SF2 2.1.1's ``--train_for_seconds`` is never checked (``total_train_seconds`` stays 0
in its runner), so the run gets SIGINT ``--seconds`` after its first trained batch shows in its
log, and SIGKILL 10 s later (:func:`supervise`). SF2 logs ``Fps is (...). Total num frames: N``
every 5 s, N the *trained* env frames (agent steps x frameskip 4, ``summaries_use_frameskip``);
the figure kept is the rate from the first report with trained frames to the last report where N
grew, as distrl's ``fps_running`` is timed from the learner's first batch to its last
(:func:`rate_from_log`).
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_VENV = ROOT / ".venv-sf2"
FRAMESKIP = 4  #: SF2's Atari env_frameskip: its frame counts are agent steps x 4
PACKAGES = 'torch==2.13.0 sample-factory==2.1.1 "gymnasium[atari]<1.0" ale-py opencv-python-headless "numpy<2"'
MAKE_VENV = (  # Pong's and Breakout's ROMs, from the ale-py of distrl's environment
    f"python -m venv {{venv}} && {{venv}}/bin/pip install {PACKAGES} && mkdir -p /tmp/sf2roms && "
    "d=\"$(python -c 'import ale_py, os; print(os.path.dirname(ale_py.__file__))')/roms\" && "
    'cp "$d/pong.bin" "$d/breakout.bin" /tmp/sf2roms/ && {venv}/bin/ale-import-roms /tmp/sf2roms'
)

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_REPORT = re.compile(
    r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]\[\d+\] Fps is \(([^)]*)\)\. "
    r"Total num frames: (\d+)\. .*?Samples: (\d+)"
)


def missing(venv: Path, rom: str = "Pong") -> str | None:
    """``None`` when ``venv`` can run SF2's Atari example on the game whose ROM ale-py 0.8.1 names
    ``rom`` (``Pong``, ``Breakout``), else one line saying how to make it."""
    py = venv / "bin" / "python"
    if not py.exists():
        return f"Sample Factory 2 venv {venv} is missing; make it with: {MAKE_VENV.format(venv=venv)}"
    probe = subprocess.run(
        [str(py), "-c", f"import sf_examples.atari.train_atari, ale_py.roms as r; assert r.{rom}"],
        check=False,
        capture_output=True,
        text=True,
    )
    if probe.returncode:
        return (
            f"Sample Factory 2 venv {venv} cannot run {rom} ({probe.stderr.strip().splitlines()[-1:]}); "
            f"remake it with: {MAKE_VENV.format(venv=venv)}"
        )
    return None


def command(
    venv: Path,
    train_dir: Path,
    workers: int,
    envs_per_worker: int,
    splits: int,
    extra: tuple[str, ...] = (),
    *,
    module: str = "sf_examples.atari.train_atari",
    env: str = "atari_pong",
    experiment: str = "bench",
    save_every_s: int = 100_000,
    keep_checkpoints: int = 1,
) -> list[str]:
    """SF2's Atari example on ``atari_pong``, CPU only, its Atari defaults but this layout; a
    benchmark saves no checkpoint. ``module`` and ``env``: another entry point that parses SF2's
    Atari arguments (``experiments/sf2_child.py``)."""
    return [
        str(venv / "bin" / "python"),
        "-m",
        module,
        "--env",
        env,
        "--experiment",
        experiment,
        "--train_dir",
        str(train_dir),
        "--device",
        "cpu",
        "--num_workers",
        str(workers),
        "--num_envs_per_worker",
        str(envs_per_worker),
        "--worker_num_splits",
        str(splits),
        "--restart_behavior",
        "overwrite",
        "--with_wandb",
        "False",
        "--save_every_sec",
        str(save_every_s),
        "--keep_checkpoints",
        str(keep_checkpoints),
        *extra,
    ]


def parse_reports(log: str) -> list[tuple[float, int, int]]:
    """``(unix time, trained env frames, samples collected)`` of every ``Fps is`` line of an SF2 log."""
    out = []
    for m in _REPORT.finditer(_ANSI.sub("", log)):
        t = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        out.append((t, int(m.group(3)), int(m.group(4))))
    return out


def rate_from_log(log: str) -> dict:
    """SF2's throughput from its log: ``frames_per_s`` (trained env frames per wall second from the
    first report with trained frames to the last where the count grew: its first batch to its
    last, to the 5 s of its report interval), ``agent_steps_per_s`` (that / frameskip 4),
    ``frames`` (trained frames at the end), ``reports``. NaN rates when it trained fewer than
    two batches."""
    reports = parse_reports(log)
    grew = [r for prev, r in itertools.pairwise(reports) if r[1] > prev[1]]
    nan = float("nan")
    out = {
        "frames": reports[-1][1] if reports else 0,
        "reports": len(reports),
        "frames_per_s": nan,
        "agent_steps_per_s": nan,
    }
    if len(grew) >= 2 and grew[-1][0] > grew[0][0]:
        fps = (grew[-1][1] - grew[0][1]) / (grew[-1][0] - grew[0][0])
        out.update(frames_per_s=fps, agent_steps_per_s=fps / FRAMESKIP)
    return out


def supervise(cmd: list[str], log_file: Path, seconds: float, startup_s: float = 300.0, grace_s: float = 10.0) -> float:
    """Run SF2's ``cmd``, one OpenMP thread a process, its output into ``log_file``, for ``seconds``
    of wall time from its first trained batch in its log, at most ``startup_s`` waiting for that
    batch; then SIGINT, and SIGKILL ``grace_s`` later. Returns the wall seconds from its start to
    its end."""
    start = time.perf_counter()
    first_batch = None
    with open(log_file, "w") as f:
        proc = subprocess.Popen(
            cmd,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            # a shell's background job (``cmd &``) ignores SIGINT, and Python keeps an ignored SIGINT
            # ignored: SF2 would never see the one that ends it
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        while proc.poll() is None:
            now = time.perf_counter()
            if first_batch is None and any(n for _, n, _ in parse_reports(log_file.read_text(errors="replace"))):
                first_batch = now
            if now >= (first_batch + seconds if first_batch else start + startup_s):
                break
            time.sleep(1.0)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C would do: SF2's runner stops, its learner saves
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return time.perf_counter() - start


def run(
    seconds: float,
    workers: int,
    envs_per_worker: int = 1,
    splits: int = 1,
    extra: tuple[str, ...] = (),
    venv: Path = DEFAULT_VENV,
    log_path: Path | None = None,
    startup_s: float = 300.0,
) -> dict:
    """Run SF2 on Pong for ``seconds`` of wall time from its first trained batch in its log (its
    start took 20-50 s on a loaded 2-core machine, over 120 s with 16 envs a worker: each env steps
    128 x its index random steps first, SF2's decorrelation; distrl's ``--max-time-s`` counts from
    its learner's start, so this gives SF2 the same time or more), at most ``startup_s`` waiting for
    that batch (:func:`supervise`). Returns :func:`rate_from_log` of its log plus ``wall_s`` and
    ``command``; raises ``RuntimeError`` when the venv is missing (the message says how to make it)."""
    why = missing(venv)
    if why:
        raise RuntimeError(why)
    with tempfile.TemporaryDirectory() as tmp:
        cmd = command(venv, Path(tmp), workers, envs_per_worker, splits, extra)
        log_file = Path(log_path or Path(tmp) / "sf2.log")
        wall = supervise(cmd, log_file, seconds, startup_s)
        log = log_file.read_text(errors="replace")
        out = rate_from_log(log)
        if not math.isfinite(out["frames_per_s"]):  # it failed, or trained fewer than two batches: say why
            out["error"] = "\n".join(_ANSI.sub("", log).strip().splitlines()[-8:])
    return {**out, "wall_s": round(wall, 1), "command": " ".join(cmd)}


LAYOUTS = {  # name -> (envs per worker, splits, extra flags); workers = the machine's cores
    "atari defaults (1 env a worker)": (1, 1, ()),
    # the defaults' 8 envs (8 workers x 1) on 2 workers: each iteration the same 1,024 samples
    "atari defaults, 8 envs on 2 workers (4 a worker)": (4, 1, ()),
    "16 envs a worker, 2 splits, async": (16, 2, ("--async_rl", "True")),
    "16 envs a worker, 2 splits, async, 1 epoch": (16, 2, ("--async_rl", "True", "--num_epochs", "1")),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0, help="wall time from its first trained batch (then SIGINT)")
    ap.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)), help="SF2 rollout workers")
    ap.add_argument("--layout", choices=list(LAYOUTS), default=next(iter(LAYOUTS)), help="envs a worker, splits, flags")
    ap.add_argument("--venv", type=Path, default=DEFAULT_VENV, help="the venv SF2 is installed in")
    ap.add_argument("--log", type=Path, default=None, help="keep SF2's log here")
    args = ap.parse_args()
    try:
        r = run(args.seconds, args.workers, *LAYOUTS[args.layout], venv=args.venv, log_path=args.log)
    except RuntimeError as e:
        sys.exit(str(e))
    print(
        f"SF2 {args.workers} workers, {args.layout}: {r['frames_per_s']:,.0f} trained frames/s "
        f"= {r['agent_steps_per_s']:,.0f} agent steps/s ({r['frames']:,} frames in {r['wall_s']} s)\n{r['command']}"
        + (f"\nSF2 failed:\n{r['error']}" if "error" in r else "")
    )


if __name__ == "__main__":
    main()
