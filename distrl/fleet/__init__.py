"""The TorchRL collector fleet: ``FleetCollector`` (``collector.py``) over IMPALA's actors, run
in this process or as rpc processes (``backends.py``), configured by ``FleetConfig`` (``config.py``)."""
