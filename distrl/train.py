"""Train a distrl recipe: the one entry point, installed or from a checkout.

    distrl train impala --env CartPole-v1                                 # one process
    distrl train impala --nproc 3 --env CartPole-v1                       # 3 processes, this machine
    torchrun --standalone --nproc-per-node=3 -m distrl.train impala ...   # the same under torchrun
    python launch/train.py impala ...                                     # from a checkout

Every bad option, unknown env id or world size the recipe cannot fill ends here with one
line on stderr and exit status 2, before any process group starts; so does a run directory that
another live launch holds (:func:`distrl.job.claim_run_dir`: rank 0 holds it for the run).

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

from distrl.cli import build_config, make_parser, recipe_help  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv``, validate, and run this process's share of the job; returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = make_parser()
    if {"-h", "--help"} & set(argv):
        text = recipe_help(argv)  # RECIPE --help: that recipe's fields and experiments as well
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
    from distrl.job import claim_run_dir, ensure_run_dir_free
    from distrl.runner import check_run_dir, plan, run

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
            from distrl.launcher import standalone

            return standalone(args.nproc, argv)
        if args.print_config:
            if rank == 0:
                print(p.cfg.to_json())
            return 0
        if rank == 0:
            layout = ", ".join(f"{r}:{n}" for r, n in p.roles.items())
            print(f"[distrl] {p.recipe.name} on {p.cfg.run.env}, world size {world_size} ({layout}), run dir {p.run_dir}",
                  flush=True)
        code = run(p, rank)
        summary = p.run_dir / "summary.json"
        if rank == 0 and args.print_summary and summary.exists():
            print(summary.read_text())
        return code


def console(argv: list[str] | None = None) -> int:
    """The ``distrl`` command: ``distrl train RECIPE ...``, ``distrl export-policy RUN_DIR OUT.pt``
    (``distrl --version``)."""
    import distrl

    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--version"]:
        print(f"distrl {distrl.__version__}")
        return 0
    if argv[:1] == ["export-policy"]:
        from distrl.trained_policy import export_main

        return export_main(argv[1:])
    if argv[:1] != ["train"]:
        print("usage: distrl train RECIPE [options]   (distrl train --help; distrl train RECIPE --help)\n"
              "       distrl export-policy RUN_DIR OUT.pt   (a trained policy as a TorchRL actor; --help)",
              file=sys.stderr)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    return main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
