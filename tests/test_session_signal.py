"""A learner session inside someone's process takes SIGTERM for its checkpoint-and-stop, and gives
the caller's handler back when it finishes."""

from __future__ import annotations

import signal

import torch

from distrl.runtime.context import RoleContext
from distrl.recipes.impala.recipe import default as default_config
from distrl.config import override
from distrl.roles.session import LearnerSession


def test_finish_gives_the_callers_sigterm_handler_back(tmp_path):
    def mine(*_):
        pass

    signal.signal(signal.SIGTERM, mine)
    cfg = override(default_config(), **{"run.logger": "none", "run.eval_episodes": 0})
    session = LearnerSession(RoleContext(cfg, None, 0, {0: "learner"}, tmp_path))
    assert signal.getsignal(signal.SIGTERM) is not mine  # the session's own: checkpoint, then stop
    model = torch.nn.Linear(2, 2)
    session.finish("total_frames", [], model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert signal.getsignal(signal.SIGTERM) is mine


def test_every_stop_signal_is_a_flag_and_sigcont_marks_a_pause(tmp_path):
    """SIGINT, SIGHUP and SIGQUIT stop a session as SIGTERM does (the first one names the reason);
    SIGCONT, which a stopped process gets when it goes on, is remembered (``paused_since``)."""
    import os
    import time

    before = {s: signal.getsignal(s) for s in (signal.SIGQUIT, signal.SIGCONT, signal.SIGHUP, signal.SIGINT)}
    cfg = override(default_config(), **{"run.logger": "none", "run.eval_episodes": 0})
    session = LearnerSession(RoleContext(cfg, None, 0, {0: "learner"}, tmp_path))
    t = time.monotonic()
    assert not session.signals.paused_since(t)
    os.kill(os.getpid(), signal.SIGCONT)
    assert session.signals.paused_since(t)
    os.kill(os.getpid(), signal.SIGHUP)
    os.kill(os.getpid(), signal.SIGINT)  # a second signal changes nothing
    assert session.should_stop() and session.stop_reason == "sighup"
    model = torch.nn.Linear(2, 2)
    session.finish("sighup", [], model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert {s: signal.getsignal(s) for s in before} == before


def test_a_second_ctrl_c_a_second_later_interrupts_at_once():
    """The same Ctrl-C arriving twice (from the terminal, and forwarded by the supervisor) is one stop;
    a second Ctrl-C a second or more later is the user's: ``KeyboardInterrupt`` then, no checkpoint wait."""
    import os

    import pytest

    from distrl.runtime.signals import REPEAT_S, StopSignals

    signals = StopSignals()
    signals.install()
    try:
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)  # the same Ctrl-C, forwarded
        assert signals.reason == "sigint"
        signals.at -= REPEAT_S + 0.1  # as if a second had passed
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    finally:
        signals.restore()
