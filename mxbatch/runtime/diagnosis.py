"""The words of a hang's diagnosis, from measured facts only: where each role is (its
main thread's stack, dumped in its current idle spell: ``stacks.MainStack`` in its
record), that it is stopped (``/proc``), and how many batches each worker pushed (its
hook counted its kvstore pushes). What was not measured is not said: without two
counts no claim on batches, without a stack no place.

The watcher (``watch``) builds its stall and deadlock reasons with these. Standard
library only.
"""

from typing import Iterable, List, Optional

from .stacks import MainStack
from .states import TaskRecord

#: how many other roles' places a reason names at most
OTHERS_SHOWN = 4


def label(record: TaskRecord) -> str:
    return "%s[%d]" % (record.role.value, record.rank)


def stack_of(record: TaskRecord) -> Optional[MainStack]:
    """The role's main thread as this idle spell's dump showed it; None: not known."""
    return MainStack.parse(record.stack) if record.stack else None


def where(record: TaskRecord) -> str:
    """Where the role is, from its stack: ``at train.py:41 in main (time.sleep(600))``,
    ``in a kvstore call (...)``; empty when no dump of this idle spell is known."""
    stack = stack_of(record)
    return stack.describe() if stack is not None else ""


def others(records: Iterable[TaskRecord], named: Iterable[TaskRecord]) -> str:
    """``; the others: worker[0] idle 62s in a kvstore call (...), server[0] ...``: the
    other active roles that are idle with a known stack, or stopped (the roles that
    wait on the named ones, or are stuck too); empty when there are none."""
    skip = {label(r) for r in named}
    parts: List[str] = []
    for record in sorted(records, key=lambda r: -max(r.idle_s, r.stopped_s)):
        if not record.state.active or label(record) in skip:
            continue
        if record.stopped_s:
            parts.append("%s stopped for %ds" % (label(record), record.stopped_s))
        elif where(record):
            parts.append("%s idle %ds %s" % (label(record), record.idle_s, where(record)))
    if not parts:
        return ""
    more = len(parts) - OTHERS_SHOWN
    return "; the others: " + ", ".join(parts[:OTHERS_SHOWN]) + (
        " and %d more" % more if more > 0 else "")


def batches(workers: Iterable[TaskRecord]) -> str:
    """What the workers' counted pushes say: ``; batches pushed (the most pushes of one
    kvstore key): worker[0] 24, worker[1] 26: the workers ran different numbers of
    batches``, or ``...: 24 each``; empty unless at least two workers were counted."""
    counted = [r for r in workers if r.batches is not None]
    if len(counted) < 2:
        return ""
    values = {r.batches for r in counted}
    if len(values) == 1:
        return "; batches pushed (the most pushes of one kvstore key): %d each (%s)" % (
            counted[0].batches, ", ".join(label(r) for r in counted))
    return ("; batches pushed (the most pushes of one kvstore key): %s: the workers ran "
            "different numbers of batches"
            % ", ".join("%s %d" % (label(r), r.batches) for r in counted))
