"""What the processes of roles are doing, read from ``/proc`` (Linux), for stall
detection: one scan of ``/proc`` answers for every process group an agent watches.

A role runs in its own process group (its supervisor starts it in a new session),
so the group's processes are the role and whatever it started that stayed in the
group. ``snapshot`` sums their CPU time (user + system, in clock ticks) and says
whether the role process itself is stopped (state ``T``: SIGSTOP, a debugger, a
frozen job).
"""

import os
from typing import Dict, Iterable, NamedTuple


class GroupStat(NamedTuple):
    """One process group at one moment."""

    processes: int
    cpu_ticks: int
    leader_stopped: bool


def _parse_stat(text: str):
    """(state, pgrp, utime + stime) from the text of ``/proc/<pid>/stat``."""
    fields = text[text.rindex(")") + 2:].split()
    # fields[0] is field 3 of proc(5): state; pgrp is field 5; utime, stime 14 and 15
    return fields[0], int(fields[2]), int(fields[11]) + int(fields[12])


def snapshot(pgids: Iterable[int]) -> Dict[int, GroupStat]:
    """The state of each of ``pgids`` (a group with no live process is left out)."""
    wanted = set(pgids)
    counts: Dict[int, int] = {}
    ticks: Dict[int, int] = {}
    stopped: Dict[int, bool] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return {}
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as handle:
                state, pgrp, cpu = _parse_stat(handle.read())
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or not ours to read
        if pgrp not in wanted or state in ("Z", "X"):
            continue
        counts[pgrp] = counts.get(pgrp, 0) + 1
        ticks[pgrp] = ticks.get(pgrp, 0) + cpu
        if int(entry) == pgrp:
            stopped[pgrp] = state in ("T", "t")
    return {pgid: GroupStat(counts[pgid], ticks[pgid], stopped.get(pgid, False))
            for pgid in counts}
