"""distrl: distributed-RL architectures as torchrun recipes (see README.md and docs/).

The pieces a TorchRL user takes from it (docs/torchrl.md) are importable from here:
``load_policy``, ``export_policy``, ``SumTreeSampler``, ``ReplayServiceBuffer`` and ``FleetCollector``.
The package's layout (what each folder holds, which way imports go) is drawn in docs/design.md.
"""

import importlib
import importlib.abc
import importlib.util
import sys

__version__ = "0.2.0"

# Imported on first use (PEP 562): ``distrl --version`` and the launcher stay free of torch imports.
_EXPORTS = {
    "load_policy": "distrl.nn.trained_policy",
    "export_policy": "distrl.nn.export",
    "SumTreeSampler": "distrl.replay.sum_tree",
    "ReplayServiceBuffer": "distrl.replay.buffer",
    "FleetCollector": "distrl.fleet.collector",
}
__all__ = ["__version__", *_EXPORTS]

#: Modules of 0.2.0's flat layout -> where they live now. Policies exported by 0.2.0 pickle these
#: paths, and users' scripts import them, so the old names stay importable as the same module objects.
MOVED = {
    **{
        f"distrl.{m}": f"distrl.nn.{m}"
        for m in ("models", "encoders", "heads", "obs_norm", "activations", "numpy_policy", "trained_policy")
    },
    # 0.2.0's vecenv actor-critics are ActorCritic now; its exports with algo.normalize_obs pickle
    # distrl.policies.ObsNorm, which lives in obs_norm (and loads there: same forward, same statistics)
    "distrl.policies": "distrl.nn.obs_norm",
    "distrl.models_recurrent": "distrl.nn.recurrent",
    **{
        f"distrl.{m}": f"distrl.runtime.{m}"
        for m in ("supervisor", "job", "network", "affinity", "checkpoint", "faults")
    },
    **{f"distrl.{m}": f"distrl.studies.{m}" for m in ("sweep", "compare", "compare_report", "child_runs", "stats")},
    "distrl.plots": "distrl.logging.plots",
    "distrl.launcher": "distrl.cli.launcher",
    "distrl.runner": "distrl.cli.runner",
    "distrl.config_docs": "distrl.cli.help",
    "distrl.recipes.apex.transitions": "distrl.data.transitions",
    "distrl.recipes.impala.trajectory": "distrl.data.trajectory",
    "distrl.recipes.seed.trajectory": "distrl.data.unrolls",
}


class _Moved(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old module path as the module that now holds its code (one object, two names)."""

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name in MOVED else None

    def create_module(self, spec):
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module):
        pass


sys.meta_path.append(_Moved())


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'distrl' has no attribute {name!r}")
