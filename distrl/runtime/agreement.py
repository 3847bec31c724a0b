"""Every rank of a job runs the same options and the same code, or none runs.

Each rank builds its config from its own command line, and each imports the distrl it finds: a
node launched with another ``--set``, or with an older checkout, would otherwise train along with
the rest, quietly different. At start, before any role, rank 0 publishes its resolved config and
a fingerprint of its code (``distrl.__version__`` and a hash of the package's source files) in
torchrun's store (``MASTER_ADDR:MASTER_PORT``, the one the supervisors watch); every other rank
waits for them (``transport.init_timeout_s``) and compares. A difference is one line naming it
(``rank 2's options differ from rank 0's: algo.lr 0.0005 (rank 0) -> 0.001``) and exit status 2.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import timedelta
from pathlib import Path

import distrl

#: the package's source: what "the same code" means (a hash of every ``.py`` file, in path order)
PACKAGE = Path(distrl.__file__).resolve().parent


def code_fingerprint() -> str:
    """``VERSION+HASH``: distrl's version and the first 12 hex digits of a SHA-256 over its source
    files (names and contents), so two checkouts of one version with different code differ too."""
    digest = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*.py")):
        digest.update(str(path.relative_to(PACKAGE)).encode() + b"\0" + path.read_bytes())
    return f"{distrl.__version__}+{digest.hexdigest()[:12]}"


def differences(ours: dict, theirs: dict, path: str = "") -> list[str]:
    """``field X (rank 0) -> Y`` for each leaf where config dicts ``theirs`` (rank 0's) and ``ours``
    differ, dotted paths, sorted."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        keys = sorted(set(ours) | set(theirs))
        return [d for k in keys for d in differences(ours.get(k), theirs.get(k), f"{path}.{k}" if path else k)]
    return [] if ours == theirs else [f"{path} {theirs!r} (rank 0) -> {ours!r}"]


def mismatch(rank: int, config_json: str, code: str, published: dict) -> str:
    """Why rank ``rank`` (``config_json``, ``code``) cannot join rank 0's job (``published``: what
    :func:`agree` put in the store), in one line; empty when they agree."""
    if code != published["code"]:
        return f"rank {rank} runs distrl {code}, rank 0 distrl {published['code']}: launch every node from one checkout"
    diff = differences(json.loads(config_json), json.loads(published["config"]))
    if diff:
        return f"rank {rank}'s options differ from rank 0's: {', '.join(diff)}; launch every node with the same options"
    return ""


def agree(rank: int, config_json: str, timeout_s: float) -> str:
    """Rank 0: publish ``config_json`` and the code's fingerprint, return ``""``. Any other rank:
    wait up to ``timeout_s`` for them and return :func:`mismatch`'s line (``""`` if they agree, or
    if there is no store to meet at: a run outside torchrun, or torchrun with
    ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``)."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True" or "MASTER_PORT" not in os.environ:
        return ""  # no agent store to meet at before the group forms (as distrl.runtime.job.job_id)
    import torch.distributed as dist

    try:
        store = dist.TCPStore(
            os.environ["MASTER_ADDR"],
            int(os.environ["MASTER_PORT"]),
            None,
            False,
            timedelta(seconds=timeout_s),
            wait_for_workers=False,
        )
    except Exception:  # not reachable: the group's own start says so, within its timeout
        return ""
    # one key per attempt: a torchrun restart's ranks must not read the failed attempt's
    attempt = os.environ.get("TORCHELASTIC_RUN_ID", ""), os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    key = "distrl/agreement/{}/{}".format(*attempt)
    if rank == 0:
        store.set(key, json.dumps({"config": config_json, "code": code_fingerprint()}))
        return ""
    try:
        published = json.loads(store.get(key))  # waits for rank 0, up to the store's timeout
    except Exception:  # rank 0 never came (its own start failed, or it is not there): init will say so
        return ""
    return mismatch(rank, config_json, code_fingerprint(), published)
