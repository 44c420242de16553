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
"""

from __future__ import annotations

import signal
from types import FrameType
from typing import Dict, Optional

#: the signals that cancel an attached job
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class HeldSignals:
    """A context manager: while entered, ``SIGNALS`` are held back (module docstring).
    Must be entered in the main thread."""

    def __init__(self) -> None:
        #: the signal held back and not yet replayed, if any
        self.pending: Optional[int] = None
        self._previous: Dict[int, object] = {}

    def __enter__(self) -> "HeldSignals":
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
