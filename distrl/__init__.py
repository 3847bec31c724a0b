"""distrl: distributed-RL architectures as torchrun recipes (see README.md and docs/)."""

__version__ = "0.2.0"
