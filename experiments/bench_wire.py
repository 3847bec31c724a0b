"""Bytes on the wire per env step of every recipe on MinAtar Breakout, against the bound.

    python -m experiments.bench_wire [--seconds 40] [--recipes impala,seed,apex,a3c,sf,vecenv]

Each recipe runs its ``minatar`` preset for ``--seconds`` through ``launch/train.py`` at the world
size it is built for (``--nproc``: impala 3, seed 3, apex 4, a3c 3, sf 4, vecenv 2: the all-reduce
only crosses a wire between ranks), without early stop, and the table reads ``bytes_per_env_step``
from its ``summary.json``: the tensor payloads its learner (or replay shard, or parameter server)
received and sent per env step (``distrl/data/wire.py``). The bound is the observation's own bytes
plus 64 (``[4, 10, 10]`` bool: 464). Ape-X's row is what its actors send and receive; the learner's
samples from replay (``samples_per_insert`` x a transition) are printed beside it, outside the bound.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NPROC = {"impala": 3, "seed": 3, "apex": 4, "a3c": 3, "sf": 4, "vecenv": 2}
OBS_BYTES = 4 * 10 * 10  #: MinAtar Breakout's [4, 10, 10] bool observation
BOUND = OBS_BYTES + 64


def run(recipe: str, seconds: float, out: Path) -> dict:
    cmd = [
        sys.executable,
        str(ROOT / "launch/train.py"),
        recipe,
        "--nproc",
        str(NPROC[recipe]),
        "--env",
        "MinAtar/Breakout-v1",
        "--max-time-s",
        str(seconds),
        "--run-dir",
        str(out),
        "--logger",
        "none",
        "--set",
        "run.early_stop=false",
        "--set",
        "run.eval_episodes=2",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=seconds + 300)
    if proc.returncode != 0:
        raise SystemExit(f"{recipe} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads((out / "summary.json").read_text())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=40.0)
    p.add_argument("--recipes", default=",".join(NPROC))
    args = p.parse_args()
    print(
        f"MinAtar/Breakout-v1, {args.seconds:g} s each; bound: {OBS_BYTES} + 64 = {BOUND} bytes per env step",
        flush=True,
    )
    print(f"{'recipe':<8}{'procs':>6}{'env frames':>12}{'bytes/step':>12}{'of bound':>10}  note", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for recipe in args.recipes.split(","):
            s = run(recipe, args.seconds, Path(tmp) / recipe)
            b = float(s.get("bytes_per_env_step", float("nan")))
            note = (
                f"learner samples {s['sample_bytes_per_env_step']:,.0f} more"
                if "sample_bytes_per_env_step" in s
                else ""
            )
            print(
                f"{recipe:<8}{NPROC[recipe]:>6}{s['env_frames']:>12,}{b:>12,.1f}{b / BOUND:>9.0%}  {note}", flush=True
            )


if __name__ == "__main__":
    main()
