"""Ranks started with different options or code (issue #46, part two): rank 0 publishes its
resolved config and a fingerprint of its code in torchrun's store; any other rank that differs
fails at start in one line naming the difference, exit status 2 (``distrl/runtime/agreement.py``)."""

from __future__ import annotations

import json
import re

import pytest

from distrl.runtime.agreement import code_fingerprint, differences, mismatch
from helpers import free_port, train_cmd


def test_a_different_option_or_code_is_named_in_one_line():
    ours = json.dumps({"algo": {"lr": 0.001, "gamma": 0.99}, "run": {"seed": 1}})
    rank0 = {"config": json.dumps({"algo": {"lr": 0.0005, "gamma": 0.99}, "run": {"seed": 1}}), "code": "0.2.0+abc"}
    assert differences(json.loads(ours), json.loads(rank0["config"])) == ["algo.lr 0.0005 (rank 0) -> 0.001"]
    line = mismatch(2, ours, "0.2.0+abc", rank0)
    assert line.startswith("rank 2's options differ from rank 0's: algo.lr 0.0005 (rank 0) -> 0.001")
    assert "\n" not in line
    assert mismatch(1, ours, "0.1.9+def", rank0).startswith("rank 1 runs distrl 0.1.9+def, rank 0 distrl 0.2.0+abc")
    assert mismatch(1, rank0["config"], "0.2.0+abc", rank0) == ""


def test_the_code_fingerprint_is_the_version_and_a_source_hash():
    import distrl

    print_ = code_fingerprint()
    assert print_.startswith(f"{distrl.__version__}+") and len(print_.split("+")[1]) == 12
    assert code_fingerprint() == print_


@pytest.mark.long  # the long tier (DISTRL_LOAD=1): 10 s or more, a quicker test of its path in the suite
@pytest.mark.timeout(120)
def test_two_nodes_with_different_options_fail_at_start_naming_it(tmp_path, jobs):
    """Two torchrun invocations ("nodes", one rank each) with different ``algo.lr``: rank 1 says so
    in one line and exits 2; the job ends without training."""
    port = free_port()
    args = ["impala", "--experiment", "debug", "--logger", "none", "--set", "transport.init_timeout_s=8"]
    nodes = [
        jobs.start(train_cmd([*args, "--set", f"algo.lr={lr}"], nnodes=2, port=port, node_rank=node), cwd=tmp_path)
        for node, lr in ((1, 0.001), (0, 0.0005))
    ]
    codes = [n.wait(100) for n in nodes]
    out = "\n".join(n.stdout + n.stderr for n in nodes)
    assert all(c != 0 for c in codes), out[-3000:]
    # the rendezvous, not --node-rank, numbers the ranks: either node may be rank 0
    named = re.search(r"error: rank 1's options differ from rank 0's: algo\.lr (\S+) \(rank 0\) -> (\S+);", out)
    assert named and {named[1], named[2]} == {"0.0005", "0.001"}, out[-3000:]
    assert "[impala] frames" not in out
