"""Replay as a service any recipe can use: the store (``store.py``), the sum tree and its
sampler (``sum_tree.py``), the replay server role (``server.py``), its client (``client.py``) and
the TorchRL buffer over it (``buffer.py``)."""
