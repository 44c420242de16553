"""Ctrl-C is never lost (mxbatch.interrupts): a KeyboardInterrupt Python drops is raised
again, and a held signal reaches the supervisor that takes the signals over."""

from __future__ import annotations

import gc
import signal
import sys

import pytest

from mxbatch.jobs import interrupts


@pytest.fixture
def sigint_restored():
    """This test may change the SIGINT handler and the command's latch: put both back."""
    previous = {s: signal.getsignal(s) for s in interrupts.SIGNALS}
    latches = list(interrupts._LATCH)
    yield
    for signum, handler in previous.items():
        signal.signal(signum, handler)
    interrupts._LATCH[:] = latches


class _RaisesInDel:
    """Ctrl-C arriving while Python runs a ``__del__`` (as during an import's weakref
    callback): the KeyboardInterrupt is printed as "Exception ignored" and dropped."""

    def __del__(self) -> None:
        signal.raise_signal(signal.SIGINT)


def test_a_dropped_ctrl_c_is_raised_again_before_submitting(sigint_restored, monkeypatch):
    dropped = []
    monkeypatch.setattr(sys, "unraisablehook", lambda raw: dropped.append(raw.exc_type))
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a foreground command
    interrupts._LATCH.clear()
    interrupts.install_latch()
    obj = _RaisesInDel()
    del obj
    gc.collect()
    assert dropped == [KeyboardInterrupt]  # Python printed and dropped it
    with pytest.raises(KeyboardInterrupt), interrupts.HeldSignals():
        pytest.fail("a submission started after the Ctrl-C")
    interrupts.check_interrupted()  # raised once only


def test_a_held_signal_is_replayed_to_the_supervisor(sigint_restored):
    seen = []
    with interrupts.HeldSignals() as held:
        signal.raise_signal(signal.SIGTERM)  # held: no exception, the process lives on
        assert held.pending == signal.SIGTERM
        held.replay()  # still holding: kept for the supervisor
        assert held.pending == signal.SIGTERM
        signal.signal(signal.SIGTERM, lambda signum, _frame: seen.append(signum))
        held.replay()  # the supervisor's handler is in place
        assert seen == [signal.SIGTERM] and held.pending is None


def test_a_second_signal_while_held_interrupts_at_once(sigint_restored):
    with pytest.raises(KeyboardInterrupt), interrupts.HeldSignals():
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGINT)
        pytest.fail("the second Ctrl-C did not interrupt")
