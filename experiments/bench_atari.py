"""Benchmark: agent steps/s and frames/s of every recipe on ALE/Pong-v5 with the Nature and the IMPALA
network, beside TorchRL's best collector layout, Sample Factory 2, the env-only limit and the ideal.

    python -m experiments.bench_atari [--seconds 120] [--nets nature,impala] [--recipes sf,impala,...]
        [--torchrl-seconds 30] [--ideal-seconds 5] [--skip-sf2] [--skip-torchrl] [--out runs/bench_atari]
        [--nproc sf=4,apex=4] [--sf2-layouts 0,1,2] [--sf2-venv .venv-sf2]

All in one invocation (compare ratios within one run: the machines are shared), per network:

(d) the ideal: CPU microseconds per agent step of each stage alone on one torch thread
    (``experiments.kit.measure.timed``, CPU clock of this process, its ale-py threads included): the env (ale-py's
    ``AtariVectorEnv`` of 16 envs, one thread, random actions), inference (the recipes'
    ``ActorCritic`` policy forward + Gumbel-max sampling, ``no_grad``, batch 256 uint8) and training
    (``sf``'s own APPO loss, ``distrl.algorithms.appo.appo_loss`` with the ``atari`` preset's
    settings, backward, per-tower clip, Adam, on one minibatch of the preset, ``[batch_size /
    num_minibatches, unroll_length]``, times the preset's ``num_epochs``: passes over each sample),
    inference and training in the preset's ``net.precision``;
    ideal agent steps/s = cores / (env + inference + train) seconds. A shared VM's speed drifts
    10-40% over minutes, so the stages are timed at the start, just before every recipe and after
    the last: the table's "of ideal" divides by each stage's cheapest timing in the run
    (``experiments.kit.measure.cheapest``, the harshest ideal), "of the ideal timed around it" by
    the mean of the timings just before and just after that recipe (``around``, the machine while
    it ran);
(c) the env-only limit: ``cores`` processes each stepping ``AtariVectorEnv(16, 1 thread)``, and one
    ``AtariVectorEnv(16 x cores, cores threads)``, random actions, no policy; the higher is the limit
    (``experiments/kit/pong.py``);
(a) TorchRL collecting with the same policy in each layout (``experiments/kit/pong.py``, ``cores``
    workers with one torch thread each), timed from its first batch; then the ale-py layouts with
    a PPO update in this process per batch (``ClipPPOLoss`` + GAE, one pass of minibatches of 256,
    new weights to the workers): the ratios use the best training figure (TorchRL+PPO);
(b) Sample Factory 2 on ``atari_pong`` with its Atari defaults (``experiments/sf2_atari.py``, every
    layout of its ``LAYOUTS``, ``--seconds`` each; its ``resnet_impala`` encoder for the IMPALA net);
then every recipe under ``torchrun`` for ``--seconds`` (``summary.json``: ``fps_running``, agent
steps/s from the learner's first batch to its last; ``frames_per_s``; ``time_budget``), each with
its fractions of the ideal, its ratio to TorchRL and to SF2, and where its time went. Results:
``results.json``, ``results.md`` (a table) and ``agent_steps.png`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path

import numpy as np
import torch

from distrl.algorithms.appo import appo_loss
from distrl.data import keys
from distrl.nn.models import clip_towers, sample_actions
from distrl.recipes.sf.recipe import atari
from distrl.recipes.sf.slots import rollout_layout
from experiments import sf2_atari
from experiments.kit.measure import around, cheapest, cores, fmt_ratio, ideal_fps, one_thread, timed
from experiments.kit.pong import ACTIONS, ENV_ID, ENVS, OBS, SKIP, env_only, model, torchrl_layouts, vector_env
from experiments.kit.runs import ROOT, budget_lines, train

RECIPES = ("sf", "impala", "seed", "a3c", "apex", "vecenv")
NPROC = {"sf": 4, "impala": 3, "seed": 3, "a3c": 3, "apex": 4, "vecenv": 1}
SF2_NET = {"nature": (), "impala": ("--encoder_conv_architecture", "resnet_impala")}


# ---- (d) the ideal ----------------------------------------------------------------------------


def stage_costs(net: str, seconds: float) -> dict[str, dict]:
    """CPU and wall us per agent step of env, inference and training, each alone on one thread."""
    one_thread()
    env, rng = vector_env(ENVS, 1), np.random.default_rng(0)
    acts = rng.integers(0, ACTIONS, size=(64, ENVS))

    def env_steps() -> int:
        for a in acts:
            env.step(a)
        return len(acts) * ENVS

    env_rate = timed(env_steps, seconds)
    env.close()
    preset = atari()
    algo = preset.algo  # sf's Atari update: num_epochs passes of num_minibatches steps over batch_size rows
    net_, obs = model(net, preset.net.precision), torch.randint(0, 256, (256, *OBS), dtype=torch.uint8)

    def infer() -> int:
        with torch.no_grad():
            sample_actions(net_.policy(obs))
        return len(obs)

    B, T = algo.batch_size // algo.num_minibatches, algo.unroll_length  # one minibatch
    batch = rollout_layout(1, B, T, OBS, 0, obs_dtype=torch.uint8)[keys.TRAJ][0]
    batch[keys.OBSERVATION] = torch.randint(0, 256, (B, T, *OBS), dtype=torch.uint8)
    batch[keys.NEXT_OBSERVATION] = torch.randint(0, 256, (B, T, *OBS), dtype=torch.uint8)
    batch[keys.ACTION] = torch.randint(0, ACTIONS, (B, T))
    batch[keys.ACTION_LOG_PROB] = torch.full((B, T), -math.log(ACTIONS))
    optim = torch.optim.Adam(net_.parameters(), lr=algo.lr, eps=1e-5)

    def learn() -> int:
        loss = appo_loss(net_, batch, algo)[keys.LOSS]
        optim.zero_grad(set_to_none=True)
        loss.backward()
        clip_towers(net_.tower_parameters(), algo.max_grad_norm)
        optim.step()
        return B * T

    rates = {"env": env_rate, "inference": timed(infer, seconds), "train": timed(learn, seconds)}
    passes = {"train": algo.num_epochs}  # each agent step is trained on num_epochs times
    return {
        k: {"cpu_us": r.us_per_frame("cpu") * passes.get(k, 1), "wall_us": r.us_per_frame("wall") * passes.get(k, 1)}
        for k, r in rates.items()
    }


# ---- the recipes, the table, the plot ------------------------------------------------------------


def run_recipe(recipe: str, net: str, seconds: float, nproc: int) -> dict:
    """A recipe's summary.json after ``seconds`` of training on Pong with ``net``; ``{"error": ...}`` if it failed."""
    extra = ["--max-time-s", str(seconds), "--set", f"net.encoder={net}", "--set", "run.eval_interval_s=0"]
    try:
        return train(recipe, 10**10, nproc=nproc, extra=extra, env=ENV_ID)
    except SystemExit as e:
        return {"error": str(e)[-2000:]}


def rows(res: dict) -> list[list[str]]:
    """Table rows of one network's results: references first, then every recipe."""
    ideal, trl, sf2 = res["ideal"], res.get("torchrl_ref", float("nan")), res.get("sf2_ref", float("nan"))
    row = lambda name, fps, run="", local=None: [
        name,
        f"{fps:,.0f}",
        f"{SKIP * fps:,.0f}",
        f"{fps / ideal:.0%}",  # noqa: E731
        f"{fps / local:.0%} of {local:,.0f}" if local else "",
        fmt_ratio(fps / trl),
        fmt_ratio(fps / sf2),
        run,
    ]
    out = [row("ideal (d)", ideal), row("env-only limit (c)", res["env_only_limit"])]
    for name, fps in {**res.get("torchrl", {}), **{f"SF2 {k}": v for k, v in res.get("sf2", {}).items()}}.items():
        out.append(row(name, fps))
    for recipe, s in res["recipes"].items():
        if "error" in s:
            out.append([recipe, "failed", "", "", "", "", "", ""])
        else:
            out.append(row(f"{recipe} ({s['nproc']} procs)", s["fps_running"], f"{s['fps']:,.0f}", s.get("ideal")))
    return out


def markdown(results: dict) -> str:
    """One table a network: agent steps/s and frames/s from the first batch, fraction of the ideal, ratios."""
    head = [
        "",
        "agent steps/s",
        "frames/s",
        "of ideal",
        "of the ideal timed around it",
        "x TorchRL+PPO",
        "x SF2",
        "agent steps/s, whole run",
    ]
    out = [
        (
            f"Pong (ALE/Pong-v5, frame skip {SKIP}), {results['cores']} cores, {results['seconds']:.0f} s a run. "
            "Rates are wall-clock, from the first trained batch (TorchRL: its first batch); of ideal: against "
            "each stage's cheapest timing in the run; of the ideal timed around it: against the stages' mean "
            "timings just before and just after that recipe ran; x TorchRL+PPO: against TorchRL's best layout "
            "training with PPO; x SF2: against SF2's best layout."
        )
    ]
    for net, res in results["nets"].items():
        out += [f"\n### {net} network\n", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        out += ["| " + " | ".join(r) + " |" for r in rows(res)]
    return "\n".join(out) + "\n"


def _short(name: str) -> str:
    """A layout's name short enough for an axis label."""
    for long, short in (
        ("MultiSyncCollector", "TorchRL MultiSync"),
        ("MultiAsyncCollector", "TorchRL MultiAsync"),
        ("Collector 1", "TorchRL Collector 1"),
        ("GymWrapper(AtariVectorEnv(", "ale-py("),
        (" thread))", " thr)"),
        (" threads))", " thr)"),
        ("SerialEnv(4 x GymWrapper(gymnasium AtariPreprocessing))", "4 gymnasium envs"),
    ):
        name = name.replace(long, short)
    return name


def plot(results: dict, path: Path) -> None:
    """Horizontal bars of agent steps/s per network (grey: limits, orange: TorchRL, green: SF2,
    blue: distrl's recipes), each labelled with its fraction of the ideal (the dashed line); a log
    axis, as the env-only limit is 4-40x every trained rate."""
    import matplotlib  # here, not at the top: the backend is set before pyplot loads, and only a plot pays

    matplotlib.use("Agg")  # files only: no display on a cluster node
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    nets = list(results["nets"])
    fig, axes = plt.subplots(1, len(nets), figsize=(9 * len(nets), 6), squeeze=False)
    for ax, net in zip(axes[0], nets):
        res = results["nets"][net]
        r = [x for x in rows(res)[1:] if x[1] != "failed"]
        kind = lambda name: (
            "grey"
            if "(c)" in name
            else "tab:orange"
            if "Collector" in name
            else "tab:green"
            if name.startswith("SF2")
            else "tab:blue"
        )
        fps = [float(x[1].replace(",", "")) for x in r]
        bars = ax.barh([_short(x[0]) for x in r], fps, color=[kind(x[0]) for x in r])
        ax.bar_label(bars, [x[3] for x in r], padding=3, fontsize=8)
        ax.axvline(res["ideal"], ls="--", color="k", label=f"ideal {res['ideal']:,.0f}")
        ax.set(
            title=f"Pong, {net} network, {results['cores']} cores",
            xscale="log",
            xlabel="agent steps/s, log scale (x4 = frames/s)",
        )
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # 2x10^2 ... labels collide
        ax.tick_params(axis="y", labelsize=8)
        ax.invert_yaxis()
        ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def measure_net(net: str, args, n_cores: int) -> dict:
    """Every figure of one network, printed as it comes."""
    print(f"\n== {net} network, {n_cores} cores", flush=True)
    ideal_of = lambda c: ideal_fps({k: v["cpu_us"] for k, v in c.items()}, n_cores)  # noqa: E731
    costs = stage_costs(net, args.ideal_seconds)
    res = {"stage_us": costs, "ideal": ideal_of(costs), "recipes": {}}
    print(
        "  (d) "
        + ", ".join(f"{k} {v['cpu_us']:.0f} us (wall {v['wall_us']:.0f})" for k, v in costs.items())
        + f" per agent step, CPU clock, one thread -> ideal {res['ideal']:,.0f} agent steps/s",
        flush=True,
    )
    res["env_only"] = env_only(n_cores, args.ideal_seconds)
    res["env_only_limit"] = max(res["env_only"].values())
    for name, fps in res["env_only"].items():
        print(f"  (c) env only, {name}: {fps:,.0f} agent steps/s", flush=True)
    if not args.skip_torchrl:
        res["torchrl"] = torchrl_layouts(net, n_cores, args.torchrl_seconds)
        trained = [k for k in res["torchrl"] if k.endswith("+ PPO")]
        res["torchrl_ref"] = max(res["torchrl"][k] for k in trained)
        for name, fps in res["torchrl"].items():
            print(
                f"  (a) torchrl {name}: {fps:,.0f} agent steps/s{' (training)' if name in trained else ''}", flush=True
            )
    if not args.skip_sf2:
        why = sf2_atari.missing(args.sf2_venv)
        if why:
            print(f"  (b) SF2 skipped: {why}", flush=True)
        else:
            res["sf2"], res["sf2_runs"] = {}, {}
            for i, (name, (e, splits, extra)) in enumerate(sf2_atari.LAYOUTS.items()):
                if i not in args.sf2_layouts:
                    continue
                r = res["sf2_runs"][name] = sf2_atari.run(
                    args.seconds, n_cores, e, splits, extra + SF2_NET[net], venv=args.sf2_venv
                )
                res["sf2"][f"{n_cores} workers, {name}"] = r["agent_steps_per_s"]
                print(
                    f"  (b) SF2 {name}: {r['agent_steps_per_s']:,.0f} agent steps/s ({r['frames_per_s']:,.0f} "
                    f"trained frames/s, {r['frames']:,} frames in {r['wall_s']} "
                    f"s){' ' + r['error'] if 'error' in r else ''}",
                    flush=True,
                )
            finite = [v for v in res["sf2"].values() if math.isfinite(v)]
            res["sf2_ref"] = max(finite) if finite else float("nan")
    timings = [costs]  # the stages timed at the start, before every recipe and after the last
    for n, recipe in enumerate(args.recipes):
        if n or not args.skip_torchrl or not args.skip_sf2:  # else the start's timing is just before it
            timings.append(stage_costs(net, args.ideal_seconds))
        nproc = args.nproc.get(recipe, NPROC[recipe])
        s = run_recipe(recipe, net, args.seconds, nproc)
        keep = ("fps_running", "fps", "frames_per_s", "env_frames", "policy_lag_mean", "time_budget", "frames_dropped")
        res["recipes"][recipe] = (
            {"error": s["error"]} if "error" in s else {"nproc": nproc, **{k: s.get(k) for k in keep}}
        )
        if "error" in s:
            print(f"  {recipe} failed:\n{s['error']}", flush=True)
            continue
        if s.get("fps_running") is None:
            res["recipes"][recipe] = {"error": "trained on fewer than two batches"}
            print(f"  {recipe}: trained on fewer than two batches in {args.seconds} s", flush=True)
            continue
        fps = s["fps_running"]
        print(
            f"  {recipe} ({nproc} procs): {fps:,.0f} agent steps/s = {SKIP * fps:,.0f} frames/s from its first batch "
            f"({s['fps']:,.0f} / {s['frames_per_s']:,.0f} over the whole run), "
            f"{fmt_ratio(fps / res.get('torchrl_ref', math.nan))} TorchRL+PPO, "
            f"{fmt_ratio(fps / res.get('sf2_ref', math.nan))} SF2",
            flush=True,
        )
        print("\n".join(budget_lines(s)), flush=True)
        res["recipes"][recipe]["timed_before"] = len(timings) - 1  # its "after" is the next timing
    if args.recipes:
        timings.append(stage_costs(net, args.ideal_seconds))
        for s in res["recipes"].values():
            if "timed_before" in s:
                i = s["timed_before"]
                s["ideal"] = ideal_fps(around(timings[i], timings[i + 1]), n_cores)
        res["stage_us_runs"] = timings
        res["stage_us"] = cheapest(*timings)
        res["ideal"] = ideal_of(res["stage_us"])
        for t in timings[1:]:
            print(
                "  (d) again: "
                + ", ".join(f"{k} {v['cpu_us']:.0f} us" for k, v in t.items())
                + f" -> {ideal_of(t):,.0f}",
                flush=True,
            )
        print(
            f"  (d) each stage's cheapest timing -> ideal {res['ideal']:,.0f} agent steps/s (the table's 'of ideal')",
            flush=True,
        )
        for recipe, s in res["recipes"].items():
            if "ideal" in s:
                print(
                    f"  {recipe}: {s['fps_running']:,.0f} = {s['fps_running'] / res['ideal']:.0%} of the cheapest "
                    f"ideal, "
                    f"{s['fps_running'] / s['ideal']:.0%} of the ideal timed around it ({s['ideal']:,.0f})",
                    flush=True,
                )
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=120.0, help="training seconds of every recipe and SF2 run")
    ap.add_argument("--torchrl-seconds", type=float, default=30.0, help="seconds of each TorchRL layout")
    ap.add_argument(
        "--ideal-seconds", type=float, default=5.0, help="seconds of each stage alone and of the env-only runs"
    )
    ap.add_argument("--nets", default="nature,impala", help="encoders, comma separated")
    ap.add_argument("--recipes", default=",".join(RECIPES), help="recipes, comma separated (empty: none)")
    ap.add_argument("--nproc", default="", help="processes per recipe, e.g. sf=3,apex=4 (defaults: NPROC)")
    ap.add_argument("--skip-sf2", action="store_true", help="no Sample Factory 2 runs")
    ap.add_argument("--skip-torchrl", action="store_true", help="no TorchRL layouts")
    ap.add_argument("--sf2-layouts", default="0,1,2", help="SF2 layouts to run: indices into sf2_atari.LAYOUTS")
    ap.add_argument("--sf2-venv", type=Path, default=sf2_atari.DEFAULT_VENV, help="the venv SF2 is installed in")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_atari", help="results folder")
    args = ap.parse_args()
    args.recipes = [r for r in args.recipes.split(",") if r]
    args.sf2_layouts = {int(i) for i in args.sf2_layouts.split(",") if i}
    args.nproc = {k: int(v) for k, v in (kv.split("=") for kv in args.nproc.split(",") if kv)}
    unknown = set(args.recipes) - set(RECIPES)
    if unknown:
        ap.error(f"unknown recipes {sorted(unknown)}; known: {', '.join(RECIPES)}")
    n_cores = cores()
    results = {
        "cores": n_cores,
        "seconds": args.seconds,
        "env": ENV_ID,
        "nets": {net: measure_net(net, args, n_cores) for net in args.nets.split(",")},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    (args.out / "results.md").write_text(markdown(results))
    plot(results, args.out / "agent_steps.png")
    print("\n" + markdown(results) + f"\nwritten: {args.out}/results.json, results.md, agent_steps.png", flush=True)
    # torchrl 0.14.1's WeightSyncScheme.__del__ starts a queue thread at interpreter exit and hangs
    # there for ever (seen: 20 min after the results were written); nothing is left to clean up
    os._exit(0)


if __name__ == "__main__":
    main()
