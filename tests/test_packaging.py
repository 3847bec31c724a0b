"""distrl installed from a wheel, without a checkout: the ``distrl`` command, ``-m distrl.train``,
the experiments inside the package, ``__version__``, the license and the version pins."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from helpers import ROOT, TEST_EXTRA_MODULES, Jobs, child_env

# What a build must not see or write: the checkout's own outputs and caches.
NOT_SOURCE = shutil.ignore_patterns(
    ".git", "build", "dist", "runs", "wandb", "*.egg-info", "__pycache__", ".pytest_cache", ".whl", ".gl"
)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A wheel of a copy of this checkout (the build writes nothing into the checkout) installed,
    without its dependencies, into a bare directory."""
    tmp = tmp_path_factory.mktemp("wheel")
    shutil.copytree(ROOT, tmp / "src", ignore=NOT_SOURCE)
    jobs = Jobs(tmp / "logs")
    try:
        build = jobs.start(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                tmp / "src",
                "--no-deps",
                "--no-build-isolation",
                "-q",
                "-w",
                tmp / "dist",
            ]
        )
        assert build.wait(180) == 0, build.tail()
        wheel = next((tmp / "dist").glob("distrl-*.whl"))
        install = jobs.start(
            [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", tmp / "site", wheel]
        )
        assert install.wait(90) == 0, install.tail()
    finally:
        jobs.close()
    return tmp / "site"


def run_installed(jobs: Jobs, site: Path, args: list, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    job = jobs.start(args, cwd=cwd, env=child_env(PYTHONPATH=str(site)))  # only the wheel's distrl, no checkout
    rc = job.wait(timeout)
    return subprocess.CompletedProcess(job.cmd, rc, job.stdout, job.stderr)


@pytest.mark.timeout(720)  # the wheel (at most 270 s) and the runs below (at most 330 s), with room
def test_the_wheel_runs_without_a_checkout(installed, tmp_path, jobs):
    import distrl

    proc = run_installed(
        jobs, installed, [sys.executable, "-c", "import distrl; print(distrl.__file__, distrl.__version__)"], tmp_path
    )
    where, version = proc.stdout.split()
    assert where.startswith(str(installed)) and version == distrl.__version__
    proc = run_installed(jobs, installed, [str(installed / "bin" / "distrl"), "--version"], tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == f"distrl {distrl.__version__}", proc.stderr
    # every subcommand is the package's own, none reaches for a checkout's launch/
    for command in ("compare", "sweep", "plot"):
        proc = run_installed(jobs, installed, [str(installed / "bin" / "distrl"), command, "--help"], tmp_path)
        assert proc.returncode == 0 and proc.stdout.startswith(f"usage: distrl {command}"), proc.stderr
    # the console command, with an experiment from inside the package, trains and writes its run
    proc = run_installed(
        jobs,
        installed,
        [
            str(installed / "bin" / "distrl"),
            "train",
            "impala",
            "--experiment",
            "debug",
            "--total-frames",
            "3000",
            "--run-dir",
            "run",
        ],
        tmp_path,
        timeout=150,
    )
    assert proc.returncode == 0 and (tmp_path / "run" / "summary.json").is_file(), proc.stdout + proc.stderr
    # the module torchrun runs (-m distrl.train), here without torchrun
    proc = run_installed(
        jobs,
        installed,
        [sys.executable, "-m", "distrl.train", "seed", "--experiment", "debug_lstm", "--print-config"],
        tmp_path,
    )
    assert proc.returncode == 0 and '"core": "lstm"' in proc.stdout, proc.stderr


def test_license_version_and_pins():
    import distrl

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["license"] == "BSD-3-Clause" and "BSD 3-Clause License" in (ROOT / "LICENSE").read_text()
    assert "version" in meta["dynamic"] and distrl.__version__.count(".") == 2
    assert meta["scripts"]["distrl"] == "distrl.train:console"
    # what the code needs (tomllib here, the typing everywhere) and where it runs (/proc, /dev/shm, fifos)
    assert meta["requires-python"] == ">=3.11" and sys.version_info >= (3, 11)
    assert "Operating System :: POSIX :: Linux" in meta["classifiers"]
    assert not any(c.startswith("License ::") for c in meta["classifiers"])  # the SPDX license says it (PEP 639)
    # AutoresetMode, which distrl.envs.batched imports, is new in gymnasium 1.1
    assert any(d.replace(" ", "").startswith("gymnasium>=1.1") for d in meta["dependencies"])
    from gymnasium.vector import AutoresetMode  # noqa: F401


def test_every_package_of_the_test_extra_is_known_to_the_ci_import_check():
    """conftest.py fails an importorskip of a test-extra module under CI; its list is the extra's."""
    import importlib.metadata
    import re

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    names = {re.match(r"[A-Za-z0-9_.-]+", req).group(0).lower() for req in extra}
    assert names == set(TEST_EXTRA_MODULES), names ^ set(TEST_EXTRA_MODULES)
    installed = importlib.metadata.packages_distributions()  # module -> the distributions that provide it
    for dist, module in TEST_EXTRA_MODULES.items():
        try:
            importlib.metadata.distribution(dist)
        except importlib.metadata.PackageNotFoundError:
            continue  # not installed here: its module name cannot be checked
        assert dist in {d.lower() for d in installed.get(module, [])}, (dist, module)


def test_nothing_in_distrl_needs_torchrls_cpp_extension():
    """``torchrl._torchrl`` (behind ``PrioritizedSampler``) does not load with torch 2.13.0+cpu; no
    distrl module may depend on it, and the README says so."""
    for path in (ROOT / "distrl").rglob("*.py"):
        text = path.read_text()
        assert "PrioritizedSampler(" not in text, path
        assert "torchrl._torchrl" not in text and "import _torchrl" not in text, path
    assert "torchrl._torchrl" in (ROOT / "README.md").read_text()
