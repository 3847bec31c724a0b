"""Train a distrl recipe.

    python launch/train.py impala --env CartPole-v1                      # one process
    torchrun --standalone --nproc-per-node=3 launch/train.py impala ...  # one process per rank

Every bad option, unknown env id or world size the recipe cannot fill ends here with one
line on stderr and exit status 2, before any process group starts.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # experiments/ beside distrl/
# TensorPipe logs every closed connection at shutdown as a C++ warning; distrl reports lost peers
# itself, in one line each. Set TORCH_CPP_LOG_LEVEL=WARNING to see them again.
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")

from distrl.cli import build_config, make_parser  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = make_parser()
    args = parser.parse_args(argv)
    rank, world_size = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    from distrl.runner import check_run_dir, plan, run

    try:
        p = plan(build_config(args), world_size)
        if not args.print_config:
            check_run_dir(p)
    except ValueError as e:
        if rank == 0:
            print(f"error: {e}", file=sys.stderr)
        return 2
    if args.print_config:
        if rank == 0:
            print(p.cfg.to_json())
        return 0
    if rank == 0:
        layout = ", ".join(f"{r}:{n}" for r, n in p.roles.items())
        print(f"[distrl] {p.recipe.name} on {p.cfg.run.env}, world size {world_size} ({layout}), run dir {p.run_dir}", flush=True)
    code = run(p, rank)
    summary = p.run_dir / "summary.json"
    if rank == 0 and args.print_summary and summary.exists():
        print(summary.read_text())
    return code


if __name__ == "__main__":
    sys.exit(main())
