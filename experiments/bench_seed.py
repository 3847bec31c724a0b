"""Benchmark: SEED's training fps against TorchRL's best collector, SEED against IMPALA side by
side, and the crossover in network size where central batched inference wins.

    python -m experiments.bench_seed [--frames 600000] [--collector-frames 100000]
                                     [--sizes 64,64 256,256 512,512,512 1024,1024,1024] [--size-time-s 20]
                                     [--plot crossover.png]

All in one invocation on this machine (compare ratios within one run: the machines are shared),
timed as ``experiments/kit/measure.py`` says: one thread a process, every fps a wall-clock rate of
trained frames from the first batch on (``fps_running`` of ``summary.json``; TorchRL's layouts
likewise from their first batch):
1. TorchRL's collectors in every layout of ``experiments/kit/yardstick.py`` (collecting only) and
   the env-only limit;
2. ``seed`` and ``impala`` under ``torchrun --nproc-per-node=3`` on CartPole-v1 with their
   default configs, ``--frames`` frames each: fps, policy lag, bytes per env step;
3. TorchRL's best layout once more; the ratios are against the higher of its two figures;
4. for each ``--sizes`` entry (``net.hidden``), ``seed`` and ``impala`` with that network, the
   same 3 processes, ``--size-time-s`` seconds of training each: fps against network size.
"""

from __future__ import annotations

import argparse

from experiments.kit.runs import train, trained_fps
from experiments.kit.yardstick import Yardstick


def side_by_side(seed: dict, impala: dict) -> str:
    """seed's and impala's summaries in two columns, and seed's inference figures below them."""
    rows = [
        ("trained fps, from the first batch", "fps_running", "{:,.0f}"),
        ("over the whole run", "fps", "{:,.0f}"),
        ("policy lag mean (updates)", "policy_lag_mean", "{:.2f}"),
        ("policy lag max", "policy_lag_max", "{}"),
        ("bytes on the wire per env step", "bytes_per_env_step", "{:,.1f}"),
        ("learner updates", "learner_updates", "{:,}"),
    ]
    out = [f"{'':34s}{'seed':>14s}{'impala':>14s}"]
    for label, key, fmt in rows:
        out.append(f"{label:34s}{fmt.format(seed.get(key)):>14s}{fmt.format(impala.get(key)):>14s}")
    out.append(f"{'seed inference batch fill (req)':34s}{seed['inference_batch_fill_mean']:>14.2f}")
    out.append(f"{'seed inference batch (envs)':34s}{seed['inference_batch_envs_mean']:>14.1f}")
    latency, p95 = seed["inference_latency_ms_mean"], seed["inference_latency_ms_p95"]
    out.append(f"{'seed inference latency ms (p95)':34s}{latency:>8.2f} ({p95:.1f})")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=600_000, help="training frames of each side-by-side run")
    ap.add_argument(
        "--collector-frames",
        type=int,
        default=100_000,
        help="frames each TorchRL layout gathers after its first batch (0: skip TorchRL)",
    )
    ap.add_argument(
        "--sizes",
        nargs="*",
        default=["64,64", "256,256", "512,512,512", "1024,1024,1024"],
        help="net.hidden of each crossover point (none: skip the crossover)",
    )
    ap.add_argument("--size-time-s", type=float, default=20.0, help="seconds of training per crossover run")
    ap.add_argument("--plot", help="also draw the crossover (fps against network size) to this PNG")
    args = ap.parse_args()

    yard = Yardstick(args.collector_frames)
    yard.before()
    seed, impala = train("seed", args.frames), train("impala", args.frames)
    yard.after()
    print(f"ratios, trained frames/s from the first batch against {yard.best}:")
    print(yard.line("distrl seed, torchrun 3 procs (training)  ", seed))
    print(yard.line("distrl impala, torchrun 3 procs (training)", impala) + "\n", flush=True)
    print(side_by_side(seed, impala), flush=True)

    if args.sizes:
        print(
            f"\ntrained fps from the first batch against network size (net.hidden; 3 processes; "
            f"{args.size_time_s:.0f} s of training each)"
        )
        print(
            f"{'net.hidden':>18s}{'seed fps':>12s}{'impala fps':>12s}{'seed/impala':>13s}"
            f"{'seed B/step':>13s}{'impala B/step':>15s}",
            flush=True,
        )
        points = []
        for hidden in args.sizes:
            extra = ["--max-time-s", str(args.size_time_s), "--set", f"net.hidden={hidden}"]
            s, i = (train(r, 10**9, extra=extra) for r in ("seed", "impala"))
            sf, ifps = trained_fps(s), trained_fps(i)
            points.append((hidden, sf, ifps))
            print(
                f"{hidden:>18s}{sf:>12,.0f}{ifps:>12,.0f}{sf / ifps:>12.2f}x"
                f"{s['bytes_per_env_step']:>13,.1f}{i['bytes_per_env_step']:>15,.1f}",
                flush=True,
            )
        if args.plot:
            plot_crossover(points, args.plot)
            print(f"wrote {args.plot}")


def plot_crossover(points: list[tuple[str, float, float]], out: str) -> None:
    """fps of seed and impala against network size, ``points`` = [(net.hidden, seed fps, impala fps)]."""
    import matplotlib  # here, not at the top: the backend is set before pyplot loads, and only a plot pays

    matplotlib.use("Agg")  # files only: no display on a cluster node
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    xs = range(len(points))
    ax.plot(xs, [p[1] for p in points], "o-", label="seed (batched inference on the learner)")
    ax.plot(xs, [p[2] for p in points], "s-", label="impala (inference on each actor)")
    ax.set_xticks(list(xs), [p[0] for p in points])
    ax.set(
        xlabel="net.hidden",
        ylabel="trained env frames / s from the first batch (log)",
        yscale="log",
        title="SEED against IMPALA by network size, 3 processes",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    main()
