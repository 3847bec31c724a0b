"""The identity of one launch, the same on every rank and new for every job.

torchrun's ``TORCHELASTIC_RUN_ID`` is not that: without ``--standalone`` or ``--rdzv-id`` it is
the string ``none`` for every job, and a user who repeats ``--rdzv-id`` repeats it. So rank 0
makes a name (UTC time plus a random suffix) and publishes it in torchrun's store, where the
other ranks, on any node, read it. The store outlives a ``--max-restarts`` restart, so a
restarted group gets the same name and continues the same run directory.
"""
from __future__ import annotations

import os
import time
import uuid
from datetime import timedelta

STORE_KEY = "distrl/job_id"


def _new_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


def job_id(timeout_s: float = 120.0) -> str:
    """This job's id: new in a plain process (call it once per launch), made by rank 0 and read by
    the others under torchrun.

    ``ValueError`` (one line) if a rank waits ``timeout_s`` for rank 0's id."""
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not (addr and port and "TORCHELASTIC_RUN_ID" in os.environ):
        return _new_id()  # one process, or a launcher without torchrun's store: nobody to agree with
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        # TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 in torchrun's environment: no store to read before the
        # group forms (rank 0 hosts one later), so torchrun's run id is all the ranks share
        return os.environ["TORCHELASTIC_RUN_ID"]
    import torch.distributed as dist

    store = dist.TCPStore(addr, int(port), None, False, timedelta(seconds=timeout_s))
    if int(os.environ.get("RANK", 0)) == 0:
        # compare_set keeps an id already there: the one this job made before a restart
        return store.compare_set(STORE_KEY, "", _new_id()).decode()
    try:
        return store.get(STORE_KEY).decode()
    except RuntimeError as e:  # a timeout (DistStoreError is a RuntimeError)
        raise ValueError(f"rank {os.environ.get('RANK')}: no job id from rank 0 within {timeout_s:g}s ({e})") from None
