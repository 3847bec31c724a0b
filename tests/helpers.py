"""The one set of test helpers: paths, commands, the process table, jobs run in their own process
group, and the readers of a run directory. Fixtures that use them live in ``conftest.py``."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
TRAIN = ROOT / "launch" / "train.py"
#: every distribution of pyproject's ``test`` extra and the module it installs (checked against the extra
#: by tests/test_packaging.py): CI installs the extra, so there an importorskip of one fails (conftest.py)
TEST_EXTRA_MODULES = {
    "pytest": "pytest",
    "pytest-timeout": "pytest_timeout",
    "minatar": "minatar",
    "ale-py": "ale_py",
    "opencv-python-headless": "cv2",
    "mujoco": "mujoco",
    "imageio": "imageio",
    "packaging": "packaging",
    "pygame": "pygame",
    "mkdocs": "mkdocs",
    "mkdocs-material": "material",
    "mkdocstrings": "mkdocstrings",
    "ruff": "ruff",
}
#: environment variables that say "this is CI" (GitHub Actions sets ``CI``; .ci/run sets ``DISTRL_CI``)
CI_VARIABLES = ("CI", "DISTRL_CI")


def in_ci() -> bool:
    """Whether a :data:`CI_VARIABLES` variable is set to something other than empty, ``0`` or ``false``."""
    return any(os.environ.get(name, "").strip().lower() not in ("", "0", "false") for name in CI_VARIABLES)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env(**extra: str) -> dict[str, str]:
    """This environment for a child run: unbuffered, W&B offline, one torch thread, this checkout
    first on ``PYTHONPATH`` (a script under tests/ imports distrl whatever is installed), no torchrun
    variables inherited; ``extra`` on top."""
    env = dict(os.environ)
    path = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.update({"PYTHONUNBUFFERED": "1", "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1", "PYTHONPATH": path})
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"):
        env.pop(name, None)
    env.update(extra)
    return env


def train_cmd(
    args: list, nproc: int = 1, *, nnodes: int = 1, node_rank: int = 0, port: Optional[int] = None, script: Path = TRAIN
) -> list[str]:
    """``python SCRIPT ARGS`` (launch/train.py by default) for one process, else torchrun with the
    c10d rendezvous on 127.0.0.1 (no ``--rdzv-id``: the job's run id is torchrun's ``none``)."""
    if nproc == 1 and nnodes == 1:
        return [sys.executable, str(script), *map(str, args)]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={nnodes}",
        f"--nproc-per-node={nproc}",
        f"--node-rank={node_rank}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port or free_port()}",
        str(script),
        *map(str, args),
    ]


# ---- the process table ----------------------------------------------------------------------------


def _stat(pid: int) -> Optional[list[str]]:
    """Fields of ``/proc/<pid>/stat`` after the command name (state first), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def process_table() -> dict[int, tuple[int, str, int]]:
    """``pid -> (parent pid, state, start time)`` of every process, zombies excluded."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat(int(entry))) and fields[0] != "Z":
            out[int(entry)] = (int(fields[1]), fields[0], int(fields[19]))
    return out


def descendants(pid: int, table: Optional[dict] = None) -> set[int]:
    """PIDs of every live descendant of ``pid``, zombies excluded."""
    children: dict[int, list[int]] = {}
    for child, (parent, _, _) in (table or process_table()).items():
        children.setdefault(parent, []).append(child)
    out, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.add(c)
            todo.append(c)
    return out


def proc_state(pid: int) -> str:
    """One-letter state of ``pid`` (``R``, ``S``, ``T``...), or ``""`` when gone or a zombie."""
    fields = _stat(pid)
    return "" if fields is None or fields[0] == "Z" else fields[0]


def continue_after(job, pause_s: float, within_s: float = 10.0) -> None:
    """The one process of ``job`` that stopped itself (``DISTRL_FAULT=stop@...``), found within
    ``within_s``, gets SIGCONT ``pause_s`` seconds later."""
    deadline = time.monotonic() + within_s
    while not (stopped := [p for p in job.pids() if proc_state(p) == "T"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(stopped) == 1, job.tail()
    time.sleep(pause_s)
    os.kill(stopped[0], signal.SIGCONT)


def alive(pids) -> set[int]:
    """Those of ``pids`` still running (zombies count as gone)."""
    return {p for p in pids if proc_state(p)}


def listening(pids: set[int]) -> set[str]:
    """``host:port`` (as /proc writes them) of every TCP socket in LISTEN state owned by ``pids``."""
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


#: how /proc/net/tcp{,6} writes 127.0.0.1 (and ::1, ::ffff:127.0.0.1) at the start of an address
LOOPBACK = ("0100007F:", "00000000000000000000000001000000:", "0000000000000000FFFF00000100007F:")


def shm_files() -> set[Path]:
    """distrl's shared-memory directories that exist now."""
    from distrl.data.shm import SHM_ROOT

    return set(SHM_ROOT.glob("distrl-*"))


def live_threads(prefix: str = "") -> set[threading.Thread]:
    """This process's live threads whose name starts with ``prefix``."""
    return {t for t in threading.enumerate() if t.is_alive() and t.name.startswith(prefix)}


def threads_left(before: set[threading.Thread], prefix: str = "distrl", timeout: float = 5.0) -> set[threading.Thread]:
    """Threads named ``prefix...`` started since ``before`` and still alive after up to ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while (left := live_threads(prefix) - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


# ---- jobs ---------------------------------------------------------------------------------------


class Job:
    """A command in its own process group, its output in files (a pipe nobody reads fills at 64 KiB
    and stops the job), and every process its tree ever held, remembered by a watcher thread: a
    rank that outlives its launcher is reparented to init and leaves the launcher's tree, and it
    must still be found and killed."""

    def __init__(self, cmd: list[str], logs: Path, cwd: Path = ROOT, env: Optional[dict] = None):
        logs.mkdir(parents=True, exist_ok=True)
        self.cmd, self._out, self._err = cmd, logs / "stdout", logs / "stderr"
        with open(self._out, "wb") as out, open(self._err, "wb") as err:
            self.proc = subprocess.Popen(
                cmd,
                cwd=cwd,
                env=env or child_env(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        self.pid = self.proc.pid
        self._seen: dict[int, int] = {self.pid: process_table().get(self.pid, (0, "", 0))[2]}
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name=f"job-watch-{self.pid}", daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            self._snapshot()

    def _snapshot(self) -> None:
        table = process_table()
        for pid in descendants(self.pid, table) | {p for p in self._seen if p in table}:
            if pid in table:
                self._seen.setdefault(pid, table[pid][2])
        # a remembered child can have handed on its own children before it died: follow them too
        for pid in list(self._seen):
            for child in descendants(pid, table):
                self._seen.setdefault(child, table[child][2])

    def pids(self) -> set[int]:
        """Every process of this job still running (the same pid and start time as when seen)."""
        self._snapshot()
        table = process_table()
        return {p for p, start in self._seen.items() if p in table and table[p][2] == start}

    @property
    def stdout(self) -> str:
        return self._out.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return self._err.read_text(errors="replace")

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def tail(self, n: int = 3000) -> str:
        return f"$ {' '.join(map(str, self.cmd))}\n--- stdout\n{self.stdout[-n:]}\n--- stderr\n{self.stderr[-n:]}"

    def send(self, sig: int) -> None:
        """``sig`` to the launcher alone (as a scheduler signals the job's first process)."""
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass

    def wait_for(self, text: str, timeout: float) -> None:
        """Return once ``text`` is in the output; fail (tree killed) after ``timeout`` s or at exit."""
        deadline = time.monotonic() + timeout
        while text not in self.output:
            if self.proc.poll() is not None and text not in self.output:
                raise AssertionError(
                    f"the job ended (rc={self.proc.returncode}) without printing {text!r}\n{self.tail()}"
                )
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"no {text!r} within {timeout} s\n{self.tail()}")
            time.sleep(0.1)

    def wait(self, timeout: float) -> int:
        """The launcher's exit status; after ``timeout`` s the whole tree is killed and the test fails."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the job ran past {timeout} s and was killed\n{self.tail()}") from None

    def kill(self) -> set[int]:
        """SIGCONT and SIGKILL every process the job ever had; returns those still alive 10 s later."""
        pids = self.pids()
        for sig in (signal.SIGCONT, signal.SIGKILL):  # a stopped process must not stay stopped
            try:
                os.killpg(self.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        if self.proc.poll() is None:
            self.proc.wait(10)
        self._stop.set()
        self._watcher.join()
        deadline = time.monotonic() + 10
        while (left := alive(pids)) and time.monotonic() < deadline:
            time.sleep(0.1)  # orphans are reaped by init
        return left


class Jobs:
    """Jobs of one test, each in its own process group; all killed and checked at teardown."""

    def __init__(self, logs: Path):
        self.logs, self.started = logs, []

    def start(self, cmd: list[str], cwd: Path = ROOT, env: dict | None = None) -> Job:
        job = Job([str(c) for c in cmd], self.logs / f"job{len(self.started)}", cwd=cwd, env=env)
        self.started.append(job)
        return job

    def train(
        self, args: list[str], nproc: int = 1, timeout: float = 240, env: dict | None = None, cwd: Path = ROOT, **cmd_kw
    ) -> subprocess.CompletedProcess:
        """launch/train.py (under torchrun when ``nproc > 1``) to its end."""
        job = self.start(train_cmd(args, nproc, **cmd_kw), cwd=cwd, env=env)
        rc = job.wait(timeout)
        return subprocess.CompletedProcess(job.cmd, rc, job.stdout, job.stderr)

    def close(self) -> None:
        left = set().union(set(), *(job.kill() for job in self.started))
        assert not left, f"processes left behind: {sorted(left)}"


# ---- a run directory ------------------------------------------------------------------------------

#: Keys every recipe's summary.json carries.
SUMMARY_KEYS = {
    "recipe",
    "env",
    "world_size",
    "roles",
    "env_frames",
    "wall_s",
    "fps",
    "fps_running",
    "episodes",
    "return_mean_100",
    "eval_return_mean",
    "policy_lag_mean",
    "policy_lag_max",
    "learner_updates",
    "stop_reason",
    "target_reached",
    "min_return_after_target",
    "best_eval_return_mean",
    "evals",
}


def read_summary(run_dir: Path, extra_keys: set[str] = frozenset()) -> dict:
    """``run_dir/summary.json``, checked to hold :data:`SUMMARY_KEYS` and ``extra_keys``."""
    summary = json.loads((Path(run_dir) / "summary.json").read_text())
    missing = (SUMMARY_KEYS | set(extra_keys)) - set(summary)
    assert not missing, f"summary.json lacks {sorted(missing)}"
    return summary


def read_metrics(run_dir: Path) -> list[dict]:
    """The rows of ``run_dir/metrics.jsonl``."""
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines() if line]


def random_policy_returns(env_id: str, episodes: int, seed: int) -> list[float]:
    """Returns of ``episodes`` episodes of uniformly random actions on gymnasium's ``env_id``, episode
    ``i`` from ``reset(seed=seed + i)`` (its actions from ``action_space.seed(seed + i)``): the
    initial states of a greedy evaluation seeded ``seed``, whose vector env seeds its env ``i`` so."""
    import gymnasium as gym

    out = []
    for i in range(episodes):
        env = gym.make(env_id)
        try:
            env.reset(seed=seed + i)
            env.action_space.seed(seed + i)
            total, done = 0.0, False
            while not done:
                _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
                total, done = total + float(reward), terminated or truncated
        finally:
            env.close()
        out.append(total)
    return out


def assert_beats_random(summary: dict, margin: float, seed: int = 0) -> float:
    """The last policy's greedy evaluation (``summary``'s) beats uniformly random actions by
    ``margin``, on the same env from the same initial states (run seed ``seed``). Returns the
    random policy's mean.

    Pick the margin so that the bar also clears an untrained policy, which a greedy evaluation runs
    at its mean action: on InvertedPendulum-v5's 10 evaluation episodes random actions score 8.5, an
    untrained Gaussian policy 25.4-26.2 (8 initialisations; doing nothing, 25.6), so a margin of 30
    (a bar of 38.5) takes learning."""
    from distrl.roles.session import EVAL_SEED_OFFSET

    random = random_policy_returns(summary["env"], summary["eval_episodes"], seed + EVAL_SEED_OFFSET)
    mean = sum(random) / len(random)
    print(
        f"\n{summary['recipe']} on {summary['env']}: greedy {summary['eval_return_mean']:.1f} after "
        f"{summary['env_frames']} frames, random {mean:.1f} ({len(random)} episodes), margin {margin:g}"
    )
    assert summary["eval_return_mean"] >= mean + margin, (summary["eval_return_mean"], mean, margin)
    return mean


def hold_args(target: float = 475.0) -> list[str]:
    """Train options of a run judged on holding ``target``: it is measured, never obeyed."""
    return ["--target-return", str(target), "--set", "run.early_stop=false"]


def assert_held(summary: dict, target: float = 475.0, floor: Optional[float] = None) -> None:
    """Learning that holds: the training mean reached ``target``, never fell below ``floor``
    (default 90% of the target) afterwards, and the last policy (the one a user keeps) evaluates
    greedily at ``target`` or more."""
    floor = 0.9 * target if floor is None else floor
    assert summary["stop_reason"] in ("max_time", "total_frames"), summary["stop_reason"]
    assert summary["target_reached"] is not None, f"never reached {target}: {summary['return_mean_100']}"
    assert summary["min_return_after_target"] >= floor, summary["min_return_after_target"]
    assert summary["eval_return_mean"] >= target, summary["eval_return_mean"]
