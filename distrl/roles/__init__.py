"""Roles several recipes share: the learner session (``session.py``), the dynamic inference
batcher (``batcher.py``), and the env-stepping loops of actors (``env_runner.py``, with TorchRL's
``Collector`` behind the same interface in ``collector_runner.py``). A role only one recipe has
lives in that recipe's folder, ``distrl/recipes/<name>/``."""
