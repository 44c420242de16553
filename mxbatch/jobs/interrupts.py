"""Holding back Ctrl-C (and SIGTERM, SIGHUP) until an attached job's supervisor handles it.

An attached ``submit --wait`` or ``launch`` is cancelled by a signal. Between the start
of the submission and the moment the job's supervisor in this process (the local
``Agent``, a host ``Controller``) has installed its own handlers, Python would raise
``KeyboardInterrupt`` anywhere: half-way through writing the job's records, between
printing the job id and supervising it, inside the supervisor's set-up. ``HeldSignals``
closes that window: while it is entered, the first signal is only recorded, and
``replay`` (called by the supervisor's tick, once its handlers are in place) raises it
again for the supervisor to cancel the job. A second signal while held raises
``KeyboardInterrupt`` at once (the impatient user's way out; the CLI then cancels the
job itself). A ``submit --wait`` that follows a batch job (no supervisor here) holds
signals while submitting, then ``release`` turns a held one into ``KeyboardInterrupt``
where the follow loop cancels the job: a Ctrl-C during ``qsub`` leaves nothing queued.

Before any of that, from the command's first line, ``SigintLatch`` makes sure a Ctrl-C
is never lost: Python drops a ``KeyboardInterrupt`` raised inside a weakref callback
(an import's module lock), and the latch raises it again before a submission starts.
"""

from __future__ import annotations

import signal
from types import FrameType
from typing import Dict, List, Optional

#: the signals that cancel an attached job
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class SigintLatch:
    """SIGINT for the whole command (installed first thing by ``mxbatch.entry``): it
    raises ``KeyboardInterrupt`` as Python's own handler does, and is also remembered,
    because Python drops an exception raised while it runs a weakref callback or a
    ``__del__`` ("Exception ignored in: <function _get_module_lock.<locals>.cb>" when
    Ctrl-C comes during an import): ``check`` raises it again where it counts, before a
    job is submitted and while one is followed."""

    def __init__(self) -> None:
        self.received = False

    def install(self) -> None:
        signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, _signum: int, _frame: Optional[FrameType]) -> None:
        self.received = True
        raise KeyboardInterrupt

    def check(self) -> None:
        """``KeyboardInterrupt`` if a SIGINT came (and was perhaps dropped) since the
        last check."""
        if self.received:
            self.received = False
            raise KeyboardInterrupt


#: the command's latch, once ``install_latch`` has run (none: mxbatch used as a library)
_LATCH: List[SigintLatch] = []


def install_latch() -> None:
    """Install the command's ``SigintLatch`` (once, in the main thread), unless SIGINT is
    ignored (a background job of a shell: Python leaves it ignored too)."""
    if _LATCH or signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        return
    _LATCH.append(SigintLatch())
    _LATCH[0].install()


def check_interrupted() -> None:
    """Raise ``KeyboardInterrupt`` for a Ctrl-C that Python may have dropped (see
    ``SigintLatch``); a no-op without the latch."""
    for latch in _LATCH:
        latch.check()


class HeldSignals:
    """A context manager: while entered, ``SIGNALS`` are held back (module docstring).
    Must be entered in the main thread."""

    def __init__(self) -> None:
        #: the signal held back and not yet replayed, if any
        self.pending: Optional[int] = None
        self._previous: Dict[int, object] = {}

    def __enter__(self) -> "HeldSignals":
        check_interrupted()  # a Ctrl-C before: nothing is submitted
        for signum in SIGNALS:
            self._previous[signum] = signal.signal(signum, self._hold)
        return self

    def __exit__(self, *_exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        self._previous.clear()

    def release(self) -> None:
        """Stop holding signals back; a signal held meanwhile raises ``KeyboardInterrupt``
        here (for code that handles Ctrl-C as that exception: ``follow``)."""
        self.__exit__()
        if self.pending is not None:
            self.pending = None
            raise KeyboardInterrupt

    def _hold(self, signum: int, _frame: Optional[FrameType]) -> None:
        if self.pending is not None:
            raise KeyboardInterrupt
        self.pending = signum

    def replay(self) -> None:
        """Raise the held signal again for whoever handles it now (the supervisor); a
        no-op when none is held or while this object still handles signals itself."""
        if self.pending is None or signal.getsignal(self.pending) == self._hold:
            return
        signum, self.pending = self.pending, None
        signal.raise_signal(signum)
