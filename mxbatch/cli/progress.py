"""The live status line of an attached job (``submit --wait``, ``launch``, ``wait``).

``Progress.on_status`` is ``follow``'s observer: each poll's ``JobStatus`` becomes one
line on stderr: the job's state, per role the number of tasks in each state, the
time spent queued and the time since submission::

    mlp-ps-1a2b3c4d RUNNING | scheduler: 1 running | server: 2 running |
    worker: 2 running | 812 samples/s | queued 12s | elapsed 1m05s

(the workers' latest throughput together, once they print it, and stragglers named:
``backends.status.throughput``)

With ``restarts`` the line says which attempt runs, counted from 1 (``attempt 2/4``:
the second of at most four), after the state.

On a terminal (``ProgressMode.LIVE``) the line is redrawn in place and cleared
before each streamed log line, so logs scroll above it; otherwise (``PLAIN``) a plain
line is printed when the counts change (at most every ``PLAIN_MIN_INTERVAL_S``) and
every ``PLAIN_INTERVAL_S`` anyway; ``QUIET`` prints nothing.
"""

from __future__ import annotations

import enum
import time
from typing import TYPE_CHECKING, Callable, Dict, Optional, TextIO

from ..runtime.roles import Role
from ..runtime.states import TaskState

if TYPE_CHECKING:  # pragma: no cover
    from ..backends.status import JobStatus

#: seconds between plain lines when nothing changed
PLAIN_INTERVAL_S = 30.0
#: at most one plain line this often, however fast the counts change
PLAIN_MIN_INTERVAL_S = 2.0
#: a live line is redrawn at most this often (unless its counts changed)
LIVE_REDRAW_S = 0.25

_CLEAR = "\r\x1b[K"
#: how a task state reads in the line (PENDING is what users call queued), in order
_WORDS = {TaskState.RUNNING: "running", TaskState.STARTING: "starting",
          TaskState.PENDING: "queued", TaskState.SUCCEEDED: "succeeded",
          TaskState.FAILED: "failed", TaskState.CANCELLED: "cancelled",
          TaskState.LOST: "lost", TaskState.UNKNOWN: "unknown"}

_ORDER = list(_WORDS)


class ProgressMode(str, enum.Enum):
    LIVE = "live"
    PLAIN = "plain"
    QUIET = "quiet"


def choose_mode(stream: TextIO, quiet: bool) -> ProgressMode:
    """LIVE on a terminal, PLAIN otherwise, QUIET when asked."""
    if quiet:
        return ProgressMode.QUIET
    try:
        return ProgressMode.LIVE if stream.isatty() else ProgressMode.PLAIN
    except (AttributeError, ValueError):
        return ProgressMode.PLAIN


def clock(seconds: float) -> str:
    """``42s``, ``1m05s``, ``2h03m``."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def role_counts(status: JobStatus) -> str:
    """``scheduler: 1 running | server: 2 running | worker: 1 running, 1 queued``."""
    parts = []
    for role in Role:
        counts: Dict[TaskState, int] = {}
        for task in status.tasks:
            if task.role is role:
                counts[task.state] = counts.get(task.state, 0) + 1
        if counts:
            words = ", ".join(f"{n} {_WORDS.get(state, state.value.lower())}"
                              for state, n in sorted(counts.items(),
                                                     key=lambda item: _ORDER.index(item[0])))
            parts.append(f"{role.value}: {words}")
    return " | ".join(parts)


def queued_for(status: JobStatus, submitted_at: float, now: float) -> float:
    """Time spent queued: until the last task started, or until now while one waits."""
    if any(t.state is TaskState.PENDING for t in status.tasks):
        return now - submitted_at
    started = [t.started_at for t in status.tasks if t.started_at]
    return (max(started) - submitted_at) if started else 0.0


def attempt_text(status: JobStatus) -> str:
    """``attempt 1 (max 3)``: numbered from 0 as everywhere (``MXBATCH_ATTEMPT``,
    ``logs --attempt``, the attempts table), up to ``restarts.max``; "" without
    restarts."""
    if status.max_attempts <= 1 and status.attempt == 0:
        return ""
    return f"attempt {status.attempt} (max {status.max_attempts - 1})"


def summary(status: JobStatus, submitted_at: float, now: float) -> str:
    """The whole status line (see the module docstring)."""
    speed = ""
    if status.samples_per_sec is not None:
        speed = f" | {status.samples_per_sec:.0f} samples/s"
        if status.stragglers:
            speed += f" (straggler: {', '.join(status.stragglers)})"
    attempt = attempt_text(status)
    return (f"{status.job_id} {status.state.value} | "
            + (f"{attempt} | " if attempt else "")
            + f"{role_counts(status)}{speed} | "
            f"queued {clock(queued_for(status, submitted_at, now))} | "
            f"elapsed {clock(now - submitted_at)}")


class Progress:
    """Draws the status line of one followed job on ``stream`` (see the module docstring)."""

    def __init__(self, mode: ProgressMode, stream: TextIO, submitted_at: float,
                 now: Callable[[], float] = time.time) -> None:
        self.mode = mode
        self.stream = stream
        self.submitted_at = submitted_at
        self.now = now
        self._drawn = False
        self._last_status: Optional[JobStatus] = None
        self._last_counts = ""
        self._last_write = float("-inf")

    # -- follow's observer
    def on_status(self, status: JobStatus) -> None:
        self._last_status = status
        if self.mode is ProgressMode.QUIET:
            return
        now = self.now()
        counts = f"{status.state.value} {attempt_text(status)} {role_counts(status)}"
        changed = counts != self._last_counts  # since the last line written
        if self.mode is ProgressMode.LIVE:
            if changed or not self._drawn or now - self._last_write >= LIVE_REDRAW_S:
                self._draw(summary(status, self.submitted_at, now), now)
                self._last_counts = counts
        else:
            due = now - self._last_write >= PLAIN_INTERVAL_S
            if (changed and now - self._last_write >= PLAIN_MIN_INTERVAL_S) or due:
                self._write(f"mxbatch: {summary(status, self.submitted_at, now)}\n", now)
                self._last_counts = counts

    def wrap(self, echo: Callable[[str], None]) -> Callable[[str], None]:
        """``echo`` for log lines that first clears a live line (redrawn at the next poll)."""
        def echo_above(line: str) -> None:
            self.clear()
            echo(line)
        return echo_above

    def clear(self) -> None:
        """Remove the live line (before other output, and at the end)."""
        if self._drawn:
            self.stream.write(_CLEAR)
            self.stream.flush()
            self._drawn = False

    # -- drawing
    def _draw(self, text: str, now: float) -> None:
        import shutil  # only where a status line is drawn

        width = shutil.get_terminal_size((100, 24)).columns
        if len(text) >= width:
            text = text[:max(1, width - 2)] + "…"
        self._write(_CLEAR + text, now)
        self._drawn = True

    def _write(self, text: str, now: float) -> None:
        self.stream.write(text)
        self.stream.flush()
        self._last_write = now

