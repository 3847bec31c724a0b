"""Launches as a user makes them: run directories per job, two torchrun "nodes" on this machine,
the Slurm script, and which sockets a one-machine launch listens on."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, TRAIN, child_env, descendants, free_port, read_summary, run_train


def torchrun(args: list[str], nnodes: int = 1, nproc: int = 1, port: int = 0, node_rank: int = 0) -> list[str]:
    """A torchrun command with the c10d rendezvous and no ``--rdzv-id``: its run id is ``none``."""
    return [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nnodes}", f"--nproc-per-node={nproc}",
            f"--node-rank={node_rank}", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port or free_port()}",
            str(TRAIN), *args]


def test_default_run_dirs_differ_between_jobs_with_the_same_torchrun_id(tmp_path):
    """Two torchrun jobs without --rdzv-id (TORCHELASTIC_RUN_ID=none on both) get two run dirs."""
    import json

    dirs = []
    for _ in range(2):
        proc = subprocess.run(torchrun(["impala", "--experiment", "debug", "--print-config"], nproc=2), cwd=tmp_path,
                              capture_output=True, text=True, timeout=120, env=child_env())
        assert proc.returncode == 0, proc.stderr
        dirs.append(json.loads(proc.stdout)["run"]["run_dir"])
    assert dirs[0] != dirs[1] and not any(d.endswith("-none") for d in dirs), dirs


def test_another_jobs_run_is_refused_on_every_rank(tmp_path, no_leaked_processes):
    """A run directory whose job_id is torchrun's 'none' (what every such job wrote before) is another
    job's run: every rank refuses before the group forms and nothing in it changes."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")
    (run / "job_id").write_text("none")
    proc = run_train(["impala", "--experiment", "debug", "--run-dir", str(run)], nproc=3, timeout=120)
    assert proc.returncode != 0 and "already holds a run" in proc.stderr, proc.stderr[-2000:]
    assert "died" not in proc.stdout + proc.stderr and "[impala] frames" not in proc.stdout
    assert (run / "config.json").read_text() == "{}" and sorted(p.name for p in run.iterdir()) == ["config.json",
                                                                                                   "job_id"]


@pytest.mark.parametrize("recipe", ["impala", "seed"])
def test_two_nodes_learn_into_one_run_directory(recipe, tmp_path, no_leaked_processes):
    """Two torchrun invocations ("nodes", one rank each) joined by the c10d rendezvous on 127.0.0.1:
    the recipe's learner and its actor/env worker train the toy env into one run directory."""
    port = free_port()
    nodes = []
    for node in range(2):
        nodes.append(subprocess.Popen(
            torchrun([recipe, "--experiment", "debug", "--set", "transport.init_timeout_s=60"], nnodes=2,
                     port=port, node_rank=node),
            cwd=tmp_path, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        time.sleep(1.0)  # the first node hosts the rendezvous store
    outs = [n.communicate(timeout=240)[0] for n in nodes]
    assert [n.returncode for n in nodes] == [0, 0], "\n".join(o[-2000:] for o in outs)
    (run,) = (tmp_path / "runs").iterdir()
    s = read_summary(run)
    assert s["world_size"] == 2 and s["roles"]["0"] == "learner" and s["stop_reason"] == "total_frames"
    assert s["eval_return_mean"] >= 19.0  # uniform play scores 10, perfect 20


def test_slurm_script_is_valid_bash_and_uses_the_c10d_rendezvous():
    script = ROOT / "launch" / "slurm.sbatch"
    subprocess.run(["bash", "-n", str(script)], check=True, timeout=30)
    text = script.read_text()
    for needed in ("#SBATCH --nodes", "srun", "torchrun", "--rdzv-backend=c10d", "--rdzv-endpoint", "--rdzv-id",
                   "-m distrl.train", "TP_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        assert needed in text, needed


def _listening(pids: set[int]) -> set[str]:
    """``host:port`` of every TCP socket in LISTEN state owned by ``pids`` (from /proc)."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
        except OSError:  # the process ended meanwhile
            continue
    out = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                out.add(fields[1])
    return out


LOOPBACK = ("0100007F:", "00000000000000000000000001000000:", "0000000000000000FFFF00000100007F:")


@pytest.mark.parametrize("launch", ["nproc", "torchrun"])
def test_a_one_machine_launch_listens_on_loopback_only(launch, tmp_path, no_leaked_processes):
    """``--nproc 3``: torchrun's stores (in the launcher) and every rank's TensorPipe, gloo and store
    sockets listen on 127.0.0.1, nothing on another interface, for the whole run. Under plain
    ``torchrun --standalone`` the ranks do the same (torchrun's own process is torch's code)."""
    args = ["impala", "--experiment", "debug", "--run-dir", str(tmp_path / "run")]
    if launch == "nproc":
        cmd = [sys.executable, str(TRAIN), *args, "--nproc", "3"]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=3", str(TRAIN), *args]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: set[str] = set()
    while proc.poll() is None:
        watched = descendants(os.getpid()) - ({proc.pid} if launch == "torchrun" else set())
        seen |= _listening(watched)
        time.sleep(0.1)
    out = proc.communicate()[0]
    assert proc.returncode == 0, out[-3000:]
    assert len(seen) >= 4, seen  # each rank's listeners (and the launcher's stores) were seen
    assert all(addr.startswith(LOOPBACK) for addr in seen), sorted(seen)
    assert read_summary(tmp_path / "run")["world_size"] == 3
