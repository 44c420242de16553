"""What a followed log shows by default: the role's own lines, not mxbatch's bookkeeping.

A task's log file is the record and keeps everything: the role's output, its
supervisor's notes and the role hook's report lines (``runtime.notes``), and the stack
dumps a supervisor asks an idle role's Python for (faulthandler's text, which the role
itself writes). The views of it that a user reads (``submit --wait``, ``launch``,
``wait --logs``, ``logs``) show only the role's own lines unless asked for everything
(``--verbose``); what mxbatch has to say about the job (a failure, a stall, a restart,
the end) the CLI says once, from the job's records, not once per task.
"""

from __future__ import annotations

import re

from ..runtime import notes

#: the first line of one thread's part of a faulthandler dump
_DUMP_HEADER = re.compile(r"^(?:(?:Current thread|Thread) 0x[0-9a-fA-F]+\b.*|Stack) "
                          r"\(most recent call first\):$")
#: a frame of a dump (a traceback's frame has ``, in``: ``line 3, in main``)
_DUMP_FRAME = re.compile(r'^  File ".*", line \d+ in [^ ]+$')
#: what faulthandler writes before a dump of its own, which is the role's: a fatal error
#: (a crash, with faulthandler enabled), ``dump_traceback_later``'s time-out
_OWN_DUMP = ("Fatal Python error: ", "Timeout (")


def is_mxbatch_line(text: str) -> bool:
    """Whether the log line ``text`` (not prefixed) is mxbatch's, judged on its own: a
    note, a hook report, a stack dump's header or frame line."""
    return (notes.is_bookkeeping(text) or _DUMP_HEADER.match(text) is not None
            or _DUMP_FRAME.match(text) is not None)


class RoleLines:
    """Which lines of one task's log, read in order, are the role's own: a stack dump a
    supervisor asked for (every line of it: its headers, frames, the lines without a
    frame and the blank lines between its threads) is mxbatch's, like notes and hook
    reports; a dump that faulthandler makes of itself (after ``Fatal Python error:``, a
    crash) is the role's."""

    def __init__(self) -> None:
        self._in_dump = False
        self._dump_shown = False
        self._last = ""  # the last line that was not blank

    def shows(self, text: str) -> bool:
        if _DUMP_HEADER.match(text):
            if not self._in_dump:
                self._dump_shown = self._last.startswith(_OWN_DUMP)
            self._in_dump = True
            return self._dump_shown
        if self._in_dump and (not text or text.startswith("  ")):
            return self._dump_shown
        self._in_dump = False
        if text.strip():
            self._last = text
        return not notes.is_bookkeeping(text)
