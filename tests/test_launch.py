"""Launches as a user makes them: run directories per job, two torchrun "nodes" on this machine,
the Slurm script, and which sockets a one-machine launch listens on."""

from __future__ import annotations

import json
import sys
import time

import pytest

from helpers import LOOPBACK, ROOT, TRAIN, descendants, free_port, listening, read_summary, train_cmd


def test_default_run_dirs_differ_between_jobs_with_the_same_torchrun_id(tmp_path, jobs):
    """Two torchrun jobs without --rdzv-id (TORCHELASTIC_RUN_ID=none on both), started in the same
    second, get two run dirs. One rank each: rank 0 makes the id in torchrun's store either way."""
    cmds = [
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=1", "--rdzv-backend=c10d"]
        + [f"--rdzv-endpoint=127.0.0.1:{free_port()}", str(TRAIN), "impala", "--experiment", "debug", "--print-config"]
        for _ in range(2)
    ]
    started = [jobs.start(cmd, cwd=tmp_path) for cmd in cmds]
    assert [job.wait(120) for job in started] == [0, 0], "\n".join(job.tail() for job in started)
    dirs = [json.loads(job.stdout)["run"]["run_dir"] for job in started]
    assert dirs[0] != dirs[1] and not any(d.endswith("-none") for d in dirs), dirs


def test_another_jobs_run_is_refused_on_every_rank(tmp_path, jobs):
    """A run directory whose job_id is torchrun's 'none' (what every such job wrote before) is another
    job's run: every rank refuses before the group forms and nothing in it changes."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")
    (run / "job_id").write_text("none")
    proc = jobs.train(["impala", "--experiment", "debug", "--run-dir", str(run)], nproc=2, timeout=120)
    assert proc.returncode != 0 and "already holds a run" in proc.stderr, proc.stderr[-2000:]
    assert "died" not in proc.stdout + proc.stderr and "[impala] frames" not in proc.stdout
    assert (run / "config.json").read_text() == "{}" and sorted(p.name for p in run.iterdir()) == [
        "config.json",
        "job_id",
    ]


# seed's two nodes in the long tier (DISTRL_LOAD=1): 11-13 s in the suite, the same launch as impala's
@pytest.mark.parametrize("recipe", ["impala", pytest.param("seed", marks=pytest.mark.long)])
def test_two_nodes_learn_into_one_run_directory(recipe, tmp_path, jobs):
    """Two torchrun invocations ("nodes", one rank each) joined by the c10d rendezvous on 127.0.0.1,
    started together in either order (whichever binds the port hosts the store): the recipe's
    learner and its actor/env worker train the toy env into one run directory."""
    port = free_port()
    args = [recipe, "--experiment", "debug", "--set", "transport.init_timeout_s=60"]
    nodes = [jobs.start(train_cmd(args, nnodes=2, port=port, node_rank=node), cwd=tmp_path) for node in (1, 0)]
    codes = [n.wait(200) for n in nodes]
    assert codes == [0, 0], "\n".join(n.tail(2000) for n in nodes)
    (run,) = (tmp_path / "runs").iterdir()
    s = read_summary(run)
    assert s["world_size"] == 2 and s["roles"]["0"] == "learner" and s["stop_reason"] == "total_frames"
    assert s["eval_return_mean"] >= 19.0  # uniform play scores 10, perfect 20


def test_slurm_script_is_valid_bash_and_uses_the_c10d_rendezvous(jobs):
    script = ROOT / "launch" / "slurm.sbatch"
    assert jobs.start(["bash", "-n", script]).wait(30) == 0
    text = script.read_text()
    for needed in (
        "#SBATCH --nodes",
        "srun",
        "torchrun",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint",
        "--rdzv-id",
        "-m distrl.train",
        "TP_SOCKET_IFNAME",
        "GLOO_SOCKET_IFNAME",
    ):
        assert needed in text, needed


@pytest.mark.parametrize("launch", ["nproc", "torchrun"])
def test_a_one_machine_launch_listens_on_loopback_only(launch, tmp_path, jobs):
    """``--nproc 2``: torchrun's stores (in the launcher) and every rank's TensorPipe, gloo and store
    sockets listen on 127.0.0.1, nothing on another interface, for the whole run. Under plain
    ``torchrun --standalone`` the ranks do the same (torchrun's own process is torch's code). A
    short run: the sockets are open from the start, and polled every 0.1 s."""
    args = ["impala", "--experiment", "debug", "--total-frames", "4000", "--run-dir", str(tmp_path / "run")]
    if launch == "nproc":
        cmd = [sys.executable, str(TRAIN), *args, "--nproc", "2"]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(TRAIN), *args]
    job = jobs.start(cmd)
    seen: set[str] = set()
    while job.proc.poll() is None:
        watched = descendants(job.pid) | ({job.pid} if launch == "nproc" else set())
        seen |= listening(watched)
        time.sleep(0.1)
    assert job.wait(10) == 0, job.tail()
    assert len(seen) >= 4, seen  # each rank's listeners (and the launcher's stores) were seen
    assert all(addr.startswith(LOOPBACK) for addr in seen), sorted(seen)
    assert read_summary(tmp_path / "run")["world_size"] == 2


def test_a_launch_whose_rank_was_killed_by_a_signal_exits_128_plus_its_number():
    """torchrun reports a rank killed by SIGKILL as exitcode -9: ``distrl train --nproc`` ends with 137,
    as a shell reports a killed process; otherwise the failed status of largest magnitude."""
    from distrl.cli.launcher import failed_status

    assert failed_status([-9]) == 137
    assert failed_status([1, -15]) == 143
    assert failed_status([1, 5]) == 5
    assert failed_status([0]) == 1 and failed_status([]) == 1
