"""``distrl train RECIPE --nproc N``: N processes on this machine, reachable from it only.

It is ``torchrun --standalone --nproc-per-node=N -m distrl.train ...`` with one difference:
torchrun's own stores (the rendezvous and the one the ranks meet at) bind every interface,
and here they bind 127.0.0.1 (:class:`distrl.runtime.network.LoopbackTCPStore` in this launcher
process); the ranks themselves listen on loopback in either launch (``prefer_loopback``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

import torch.distributed as dist

import distrl
from distrl.runtime.network import LoopbackTCPStore, loopback_interface


def _strip_nproc(argv: list[str]) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--nproc":
            skip = True
        elif not a.startswith("--nproc="):
            out.append(a)
    return out


def failed_status(exitcodes: Iterable[int]) -> int:
    """The exit status of a launch whose ranks failed with torchrun's ``exitcodes``: the one of largest
    magnitude, and for a rank killed by signal N (torchrun's ``-N``: the OOM killer's SIGKILL) 128 + N,
    as a shell reports it (``sys.exit(-N)`` would leave 256 - N)."""
    code = max(exitcodes, key=abs, default=1) or 1
    return 128 - code if code < 0 else code


def standalone(nproc: int, argv: list[str]) -> int:
    """Run ``distrl.train`` with ``argv`` (minus ``--nproc``) on ``nproc`` local ranks; the exit status."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend
    from torch.distributed.run import parse_args, run

    lo = loopback_interface()
    if lo:  # inherited by every rank
        os.environ.setdefault("TP_SOCKET_IFNAME", lo)
        os.environ.setdefault("GLOO_SOCKET_IFNAME", lo)
    # torchrun's stores are built in this process, by name: make those names bind loopback
    dist.TCPStore = c10d_rendezvous_backend.TCPStore = LoopbackTCPStore
    # the ranks import this very distrl (a checkout's, installed or not)
    root = os.path.dirname(os.path.dirname(os.path.abspath(distrl.__file__)))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    args = parse_args(["--standalone", f"--nproc-per-node={nproc}", "-m", "distrl.train", *_strip_nproc(argv)])
    try:
        run(args)
    except ChildFailedError as e:  # torchrun already printed which rank failed and why
        return failed_status(f.exitcode for f in e.failures.values())
    except SignalException as e:  # SIGTERM/SIGINT to the launcher: torchrun has stopped the ranks
        print(f"[distrl] launcher got signal {e.sigval.name}; the ranks were stopped", file=sys.stderr)
        return 128 + int(e.sigval)
    return 0
