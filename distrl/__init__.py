"""distrl: distributed-RL architectures as torchrun recipes (see README.md and docs/).

The pieces a TorchRL user takes from it (docs/torchrl.md) are importable from here:
``load_policy``, ``export_policy``, ``SumTreeSampler``, ``ReplayServiceBuffer`` and ``FleetCollector``.
"""

__version__ = "0.2.0"

# Imported on first use (PEP 562): ``distrl --version`` and the launcher stay free of torch imports.
_EXPORTS = {
    "load_policy": "distrl.trained_policy",
    "export_policy": "distrl.trained_policy",
    "SumTreeSampler": "distrl.replay.sum_tree",
    "ReplayServiceBuffer": "distrl.replay.buffer",
    "FleetCollector": "distrl.fleet.collector",
}
__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'distrl' has no attribute {name!r}")
