"""A supervisor's view of where its idle role is: it asks the role's Python for its
stacks once an idle spell has lasted a while, and keeps what the dump showed.

A task's runner (``taskrunner``) owns one ``StackWatch`` per role process and tells it:
the hook's ``started`` report (which signal makes the role dump its stacks, the main
thread's ident: ``rolehook.HookReport``), every chunk of the role's output (``feed``:
whether it was the role's own, since a dump and the hook's report lines are no sign
of progress), every change of the role's CPU time (``cpu_is_progress``: the dump's own
few microseconds of CPU are none either), and its idle time at each look (``look``).

- **When it asks**: once per idle spell (no CPU used, no output of its own), after
  ``dump_after_s`` of it; never a stopped process (it could not answer; ``/proc`` says
  it is stopped, which is the diagnosis), never a process whose hook did not register
  the signal or that ``/proc`` does not show handling it (the signal would end it),
  never across a container's pid namespace. A dump needs no new one while the spell
  lasts: a process that uses no CPU runs no Python, so its stack is the same.
- **What it keeps**: ``stack``, the main thread's innermost frames of this spell's
  dump (``stacks.MainStack``), None once the role shows progress again.

Standard library only.
"""

import os
from typing import Callable, Optional

from . import procstat
from .notes import HOOK_PREFIX
from .rolehook import HookReport
from .stacks import DumpReader, MainStack

#: how long a dump's lines may take to arrive after the signal: output meanwhile is
#: read for the dump (else only chunks holding a hook report are)
DUMP_READ_S = 5.0
#: CPU ticks after a dump that are the dump's own, not the role's progress
DUMP_CPU_TICKS = 2
#: an idle spell this long gets a dump (less where a timeout is shorter: ``dump_after``)
STACK_IDLE_S = 10.0

_HOOK = HOOK_PREFIX.encode()


def dump_after(*timeouts_s: Optional[float]) -> float:
    """How long an idle spell lasts before the role is asked for its stacks:
    ``STACK_IDLE_S``, or half the shortest of ``timeouts_s`` (the stall and exit
    timeouts, None or 0 when off) when that is sooner, at least a second: the dump is
    in the record well before any of them decides."""
    shortest = min([t for t in timeouts_s if t] or [2 * STACK_IDLE_S])
    return max(1.0, min(STACK_IDLE_S, shortest / 2))


class StackWatch:
    """One role process's stack dumps (see the module docstring). ``say`` writes a
    supervisor note in the task's log."""

    def __init__(self, dump_after_s: float, say: Callable[[str], None],
                 same_pid_namespace: bool = True) -> None:
        self.dump_after_s = dump_after_s
        self._say = say
        self._same_ns = same_pid_namespace
        self._reader = DumpReader()
        self._signal: Optional[int] = None
        self._asked = False  # in this idle spell
        self._read_until = 0.0
        self._cpu_slack = 0
        self.stack: Optional[MainStack] = None
        #: the stack changed since the runner last took it into its record
        self.changed = False

    def on_started(self, report: HookReport) -> None:
        """A Python program of the role started (its hook's ``started``): from now on
        its signal, its pid and main thread count."""
        self._signal = report.stack_signal if report.thread is not None else None
        self._reader.expect(report.thread, report.pid)

    def feed(self, data: bytes, mono: float, wall: float) -> bool:
        """The role wrote ``data``: whether it was the role's own output (progress)."""
        if mono >= self._read_until and _HOOK not in data:
            self._reader.skip()
            return True
        own = self._reader.feed(data, wall)
        latest = self._reader.latest
        if latest is not None and latest is not self.stack and self._asked:
            self.stack, self.changed = latest, True
        return own

    def cpu_is_progress(self, ticks: int) -> bool:
        """The role used ``ticks`` more CPU ticks: progress, unless they are what its
        last dump cost."""
        if 0 < ticks <= self._cpu_slack:
            self._cpu_slack -= ticks
            return False
        return ticks > 0

    def busy(self) -> None:
        """The role shows progress: its idle spell (and the dump's stack) is over."""
        self._asked = False
        self._cpu_slack = 0
        if self.stack is not None:
            self.stack, self.changed = None, True

    def look(self, idle_s: float, pgid: int, mono: float) -> None:
        """The role has been idle ``idle_s``: ask it for its stacks if that is due (see
        the module docstring)."""
        if self._asked or idle_s < self.dump_after_s or self._signal is None:
            return
        pid = self._reader.pid
        if pid is None or not self._same_ns:
            return
        self._asked = True
        if not procstat.catches(pid, self._signal, pgid):
            return  # stopped, gone, or without the handler: it could not answer
        self._say("no CPU and no output for %ds: asking its Python for its threads' "
                  "stacks (faulthandler, signal %d to pid %d)" % (idle_s, self._signal, pid))
        try:
            os.kill(pid, self._signal)
        except OSError:
            return
        self._read_until = mono + DUMP_READ_S
        self._cpu_slack = DUMP_CPU_TICKS
