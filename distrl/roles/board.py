"""The parameter board: the learner's latest parameters, where handler threads read them.

A learner publishes after every update; a handler answering an actor reads the board and sends
the parameters only when they are newer than the actor's. Publishing swaps one attribute (a
``(version, snapshot)`` pair of CPU copies), so a reader on a transport thread sees the old pair
or the new one, never half of each, and never waits for the learner.

Used by IMPALA's learner and fleet (a ``TensorDict`` of the state dict), Ape-X's learner (the
same) and A3C's parameter server (one flat vector: its workers load it with
``vector_to_parameters``). Sample Factory publishes into shared memory instead
(``recipes/sf/slots.py``): its readers are processes on the same machine, not rpc handlers.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch import nn
from torch.nn.utils import parameters_to_vector

from distrl.data import keys


class ParameterBoard:
    """``(version, parameters)`` of one model, published by the learner, read by handlers.

    Args:
        model: the trained model; :meth:`publish` snapshots it.
        flat: snapshot the parameters as one ``[P]`` vector instead of a state-dict ``TensorDict``
            (buffers are then not sent: A3C's model has none that change).
    """

    def __init__(self, model: nn.Module, flat: bool = False):
        self.model, self.flat = model, flat
        self.published: tuple[int, TensorDict | torch.Tensor] = (-1, TensorDict())

    def publish(self, version: int) -> None:
        """Snapshot the model's parameters (CPU copies) as ``version``."""
        if self.flat:
            params = parameters_to_vector(self.model.parameters()).detach().to("cpu", copy=True)
        else:
            params = TensorDict({k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()})
        self.published = (version, params)  # one attribute write: readers see old or new

    def reply(self, their_version: int, stop: bool, min_gap: int = 1) -> TensorDict:
        """``stop``, and the published ``params`` with their ``params_version`` when they are newer
        than the caller's ``their_version`` (-1: it has none yet) by at least ``min_gap`` versions.

        ``min_gap > 1`` trades policy lag for bytes: parameters are the bulk of a reply (528 KB for
        the minatar encoder), so a caller a few updates behind keeps acting with what it has."""
        version, params = self.published
        reply = TensorDict({keys.STOP: torch.tensor(stop)})
        if version > their_version and (their_version < 0 or version - their_version >= min_gap):
            reply[keys.PARAMS], reply[keys.PARAMS_VERSION] = params, torch.tensor(version)
        return reply
