"""Supervisor notes: the lines a supervisor adds to its task's log, among the role's
own output, and the one place their format is spelled; the role hook's report lines too.

A note is ``mxbatch supervisor <role>[<rank>]: <message>``; a teardown note (the job is
being stopped because of another task) has the message ``stopping: <reason>``. The role
hook (``pyhook``, inside the role's own interpreter) writes ``mxbatch hook
<role>[<rank>]: <event> <JSON>`` on the role's stderr (``hook_line``).
Readers use ``is_note`` and ``is_teardown`` to tell them from the role's output (the
failure summary quotes the role's own last lines; streamed logs show a failing task's
output before the teardown notes of the others), and ``is_bookkeeping`` for every line
that is mxbatch's rather than the role's: what followed logs hide unless ``--verbose``
(the log files keep them all). Standard library only.
"""

import sys
from typing import Optional

PREFIX = "mxbatch supervisor "
STOPPING = "stopping: "
#: the start of a role hook's report line
HOOK_PREFIX = "mxbatch hook "
#: the start of the lean scheduler's word (``pyhook``) that it serves without its script
LEAN_SCHEDULER = "mxbatch: the scheduler runs ps-lite's scheduler from "


def note(label: str, message: str) -> str:
    """The note line (with its newline) of task ``label``."""
    return "%s%s: %s\n" % (PREFIX, label, message)


def hook_line(label: str, event: str, payload: str) -> str:
    """A role hook's report line (with its newline): ``payload`` is JSON text."""
    return "%s%s: %s %s\n" % (HOOK_PREFIX, label, event, payload)


def is_note(line: str) -> bool:
    """Whether ``line`` (a log line, prefixed or not by ``role[rank] | ``) is a note, or
    a role hook's report line."""
    return _after_prefix(line) is not None or _after_prefix(line, HOOK_PREFIX) is not None


def is_bookkeeping(line: str) -> bool:
    """Whether ``line`` (not prefixed) is mxbatch's bookkeeping, no word of the role's
    nor news of the job: a note, a hook's report line, the lean scheduler's word. The
    roles' failures reach the user as the job's outcome, said once (the CLI)."""
    return line.startswith(LEAN_SCHEDULER) or is_note(line)


def is_teardown(line: str) -> bool:
    """Whether ``line`` is a teardown note (``stopping: ...``)."""
    rest = _after_prefix(line)
    return rest is not None and rest.startswith(STOPPING)


def _after_prefix(line: str, prefix: str = PREFIX) -> Optional[str]:
    """The message of a note line (``None`` if it is none)."""
    start = line.find(prefix)
    if start < 0 or start > 80:
        return None
    label, sep, message = line[start + len(prefix):].partition(": ")
    if not sep or not label.endswith("]") or "[" not in label:
        return None
    return message


def to_stderr(text: str) -> None:
    """A supervisor's own message on its stderr (an attached CLI's terminal, a detached
    manager's ``manager.log``), never an error of its own: that file may be on the very
    storage that has just failed."""
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
