"""Train a distrl recipe: the one entry point, installed or from a checkout.

    distrl train impala --env CartPole-v1                                 # one process
    distrl train impala --nproc 3 --env CartPole-v1                       # 3 processes, this machine
    torchrun --standalone --nproc-per-node=3 -m distrl.train impala ...   # the same under torchrun
    python launch/train.py impala ...                                     # from a checkout

The installed ``distrl`` command is :func:`console`: ``train`` (this module's :func:`main`),
``compare``, ``sweep``, ``plot``, ``eval`` and ``export-policy`` (:data:`COMMANDS`).

Every bad option, unknown env id or world size the recipe cannot fill ends here with one
line on stderr and exit status 2, before any process group starts; so does a run directory that
another live launch holds (:func:`distrl.runtime.job.claim_run_dir`: rank 0 holds it for the run).

What a run writes is its user's alone: the process's umask gets ``0o077`` added for the run (run
directory, checkpoints, metrics, W&B files, shared memory), restored when :func:`main` returns.
"""

from __future__ import annotations

import contextlib
import os
import sys

# TensorPipe logs every closed connection at shutdown as a C++ warning; distrl reports lost peers
# itself, in one line each. Set TORCH_CPP_LOG_LEVEL=WARNING to see them again.
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")

from distrl.cli.options import build_config, make_parser, recipe_help  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv``, validate, and run this process's share of the job; returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = make_parser()
    if {"-h", "--help"} & set(argv):
        try:
            text = recipe_help(argv)  # RECIPE --help: that recipe's fields and experiments as well
        except ValueError as e:  # a path/to/file.py:NAME that does not load
            print(f"error: {e}", file=sys.stderr)
            return 2
        parser.print_help()
        if text:
            print(text)
        return 0
    args = parser.parse_args(argv)
    under_torchrun = "TORCHELASTIC_RUN_ID" in os.environ or "RANK" in os.environ
    if args.nproc > 1 and under_torchrun:
        print("error: --nproc starts its own processes; under torchrun use --nproc-per-node", file=sys.stderr)
        return 2
    rank = int(os.environ.get("RANK", 0))
    world_size = args.nproc if args.nproc > 1 else int(os.environ.get("WORLD_SIZE", 1))
    from distrl.runtime.job import claim_run_dir, ensure_run_dir_free
    from distrl.cli.runner import check_run_dir, plan, run

    umask = os.umask(0o077)
    os.umask(umask | 0o077)  # owner-only, whatever the user's umask allowed (inherited by --nproc's ranks)
    with contextlib.ExitStack() as held:
        held.callback(os.umask, umask)  # runs last: after the lock is released
        try:  # with --nproc, here in the launcher too: bad input fails before any process starts
            p = plan(build_config(args), world_size)
            restarted = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)) > 0
            if not args.print_config:
                if rank == 0 and not restarted:  # a live holder is named first, --resume or not
                    ensure_run_dir_free(p.run_dir)
                check_run_dir(p)
                if rank == 0 and args.nproc == 1:  # the run directory's one writer holds it (--nproc: its rank 0)
                    held.enter_context(claim_run_dir(p.run_dir, wait_s=15.0 if restarted else 0.0))
        except ValueError as e:
            if rank == 0:
                print(f"error: {e}", file=sys.stderr)
            return 2
        if args.nproc > 1 and not args.print_config:
            from distrl.cli.launcher import standalone

            return standalone(args.nproc, argv)
        if args.print_config:
            if rank == 0:
                print(p.cfg.to_json())
            return 0
        if rank == 0:
            layout = ", ".join(f"{r}:{n}" for r, n in p.roles.items())
            print(
                f"[distrl] {p.recipe.name} on {p.cfg.run.env}, world size {world_size} ({layout}), run dir {p.run_dir}",
                flush=True,
            )
        code = run(p, rank)
        summary = p.run_dir / "summary.json"
        if rank == 0 and args.print_summary and summary.exists():
            print(summary.read_text())
    if under_torchrun and world_size > 1:
        # A torchrun rank's role ran in a child that has exited (distrl/runtime/supervisor.py): nothing is left
        # to do but leave. Python's teardown of torch, tensordict and rpc modules cost 0.6-1.8 s of CPU
        # a process, which every job's end waited for; the lock above is released by then.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


#: ``distrl`` subcommands: name -> (module:function taking argv and returning the exit status, what it does)
COMMANDS = {
    "train": ("distrl.train:main", "train one recipe (distrl train RECIPE --help: its fields and experiments)"),
    "compare": (
        "distrl.studies.compare:main",
        "run several recipes on the same env, budget and seeds: table and plots",
    ),
    "sweep": ("distrl.studies.sweep:main", "one recipe over seeds without early stop: the distribution"),
    "plot": ("distrl.logging.plots:main", "learning curves of run directories side by side, one PNG"),
    "eval": ("distrl.studies.evaluate:main", "play a trained run's policy: returns, an interval, videos (RUN_DIR)"),
    "export-policy": (
        "distrl.nn.export:main",
        "a trained policy to one file: a TorchRL actor, or a torch.export program (RUN_DIR OUT)",
    ),
}


def console_help() -> str:
    """What ``distrl --help`` prints: every subcommand with one line."""
    width = max(map(len, COMMANDS))
    lines = ["usage: distrl COMMAND [options]   (distrl COMMAND --help; distrl --version)", "", "commands:"]
    lines += [f"  {name:<{width}}  {what}" for name, (_, what) in COMMANDS.items()]
    return "\n".join(lines)


def console(argv: list[str] | None = None) -> int:
    """The ``distrl`` command: ``distrl COMMAND ...`` for each of :data:`COMMANDS`, ``distrl --version``."""
    import importlib

    import distrl

    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--version"]:
        print(f"distrl {distrl.__version__}")
        return 0
    if argv[:1] in (["-h"], ["--help"]):
        print(console_help())
        return 0
    if not argv:
        print(console_help(), file=sys.stderr)
        return 2
    if argv[0] not in COMMANDS:
        print(
            f"error: unknown command {argv[0]!r}; commands: {', '.join(COMMANDS)} (see distrl --help)", file=sys.stderr
        )
        return 2
    module, _, function = COMMANDS[argv[0]][0].partition(":")
    return getattr(importlib.import_module(module), function)(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
