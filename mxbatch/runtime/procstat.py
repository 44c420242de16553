"""What the processes of roles are doing, read from ``/proc`` (Linux), for stall
detection: one scan of ``/proc`` answers for every process group an agent watches.

A role runs in its own process group (its supervisor starts it in a new session),
so the group's processes are the role and whatever it started that stayed in the
group. ``snapshot`` sums their CPU time (user + system, in clock ticks) and says
whether the role process itself is stopped (state ``T``: SIGSTOP, a debugger, a
frozen job).

A role in a docker or podman container is no process of the client's group: the
daemon starts it. The same scan then answers for the process tree under the
container's main process (``roots``: its host pid, an init such as tini, which
runs the role as its child): the tree's CPU time, and whether the root or one of
its children (the role) is stopped. ``/proc`` shows every process of the host,
those in containers included, with host pids and parents.

``snapshot`` reads only the processes under each group's leader and each root: the
kernel lists a thread's children in ``/proc/<pid>/task/<tid>/children``. A scan of
every process, once a second in every agent, made the cost grow with the square of
the tasks where many agents share a kernel (1,000 MPI ranks, an agent each then, on the
test hosts: each agent read 2,000 ``stat`` files a second). A process of the group whose
parent ended before it (re-parented out of the leader's tree) is not counted; a kernel
without those files (``CONFIG_PROC_CHILDREN``) gets the full scan.
"""

import os
from typing import Dict, Iterable, List, NamedTuple, Optional, Set, Tuple


class GroupStat(NamedTuple):
    """One process group (or container process tree) at one moment."""

    processes: int
    cpu_ticks: int
    leader_stopped: bool
    pids: Tuple[int, ...] = ()


def _parse_stat(text: str) -> Tuple[str, int, int, int]:
    """(state, ppid, pgrp, utime + stime) from the text of ``/proc/<pid>/stat``."""
    fields = text[text.rindex(")") + 2:].split()
    # fields[0] is field 3 of proc(5): state; ppid field 4, pgrp 5; utime, stime 14 and 15
    return fields[0], int(fields[1]), int(fields[2]), int(fields[11]) + int(fields[12])


class _NoChildrenFiles(Exception):
    """This kernel has no ``/proc/<pid>/task/<tid>/children``."""


def _stat(pid: int) -> Optional[Tuple[str, int, int, int]]:
    """(state, ppid, pgrp, cpu ticks) of a live process; None when gone or a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            stat = _parse_stat(handle.read())
    except (OSError, ValueError, IndexError):
        return None
    return None if stat[0] in ("Z", "X") else stat


def _children(pid: int) -> List[int]:
    """The children of ``pid`` (those of each of its threads); [] when it is gone.
    ``_NoChildrenFiles`` when the kernel does not list them."""
    try:
        threads = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return []
    found: List[int] = []
    for tid in threads:
        try:
            with open("/proc/%d/task/%s/children" % (pid, tid)) as handle:
                found.extend(int(child) for child in handle.read().split())
        except FileNotFoundError:
            if os.path.isdir("/proc/%d/task/%s" % (pid, tid)):
                raise _NoChildrenFiles() from None
        except (OSError, ValueError):
            continue
    return found


def _walked(top: int, group: Optional[int]) -> Optional[GroupStat]:
    """``top`` and its descendants (those in process group ``group`` only, when given:
    a child that left the group took its own descendants with it); None when ``top``
    is gone."""
    cpu = 0
    stopped = False
    seen: List[int] = []
    pending = [top]
    while pending:
        pid = pending.pop()
        stat = _stat(pid)
        if stat is None or (group is not None and stat[2] != group):
            continue  # only what is seen has its children looked at: top comes first
        cpu += stat[3]
        seen.append(pid)
        if stat[0] in ("T", "t") and (pid == top or (group is None and stat[1] == top)):
            stopped = True  # the leader; in a tree, the root or its child (the role)
        pending.extend(_children(pid))
    return GroupStat(len(seen), cpu, stopped, tuple(seen)) if seen else None


def snapshot(pgids: Iterable[int], roots: Iterable[int] = ()) -> Dict[int, GroupStat]:
    """The state of each of ``pgids`` and of each process tree under ``roots`` (pids),
    keyed by pgid or root pid (a pid in use as a process group is never another
    process's pid, so the keys cannot collide); one without a live process is left out.
    A group is its leader's descendants in the group (see the module docstring)."""
    pgids, roots = list(pgids), list(roots)
    try:
        walked = {key: _walked(key, group) for key, group in
                  [(pgid, pgid) for pgid in pgids] + [(root, None) for root in roots]}
    except _NoChildrenFiles:
        return _scanned(pgids, roots)
    return {key: stat for key, stat in walked.items() if stat is not None}


def _scanned(pgids: Iterable[int], roots: Iterable[int]) -> Dict[int, GroupStat]:
    """``snapshot`` from one scan of every process (a kernel without children files)."""
    wanted = set(pgids)
    tree_roots = set(roots)
    counts: Dict[int, int] = {}
    ticks: Dict[int, int] = {}
    stopped: Dict[int, bool] = {}
    members: Dict[int, List[int]] = {}
    # every live process, for the trees: pid -> (ppid, cpu, stopped)
    procs: Dict[int, Tuple[int, int, bool]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return {}
    for entry in entries:
        if not entry.isdigit():
            continue
        stat = _stat(int(entry))
        if stat is None:
            continue  # gone meanwhile, a zombie, or not ours to read
        state, ppid, pgrp, cpu = stat
        if tree_roots:
            procs[int(entry)] = (ppid, cpu, state in ("T", "t"))
        if pgrp not in wanted:
            continue
        counts[pgrp] = counts.get(pgrp, 0) + 1
        ticks[pgrp] = ticks.get(pgrp, 0) + cpu
        members.setdefault(pgrp, []).append(int(entry))
        if int(entry) == pgrp:
            stopped[pgrp] = state in ("T", "t")
    result = {pgid: GroupStat(counts[pgid], ticks[pgid], stopped.get(pgid, False),
                              tuple(members[pgid]))
              for pgid in counts}
    if tree_roots:
        children: Dict[int, List[int]] = {}
        for pid, (ppid, _, _) in procs.items():
            children.setdefault(ppid, []).append(pid)
        for root in tree_roots:
            stat = _tree_stat(root, procs, children)
            if stat is not None:
                result[root] = stat
    return result


def members(pgid: int, roots: Iterable[int] = ()) -> Set[int]:
    """The live processes of a role: its process group ``pgid``, the processes under its
    leader (those that left the group included) and the trees under ``roots`` (a
    container's main process); one scan of ``/proc``."""
    found: Set[int] = set()
    alive: Set[int] = set()
    children: Dict[int, List[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        stat = _stat(int(entry))
        if stat is None:
            continue
        _, ppid, pgrp, _ = stat
        alive.add(int(entry))
        children.setdefault(ppid, []).append(int(entry))
        if pgrp == pgid:
            found.add(int(entry))
    pending = [pgid] + list(roots)
    while pending:
        pid = pending.pop()
        pending.extend(children.pop(pid, ()))
        if pid in alive:
            found.add(pid)
    return found


def _tree_stat(root: int, procs: Dict[int, Tuple[int, int, bool]],
               children: Dict[int, List[int]]) -> Optional[GroupStat]:
    """The tree under ``root``: its size, CPU time, and whether the root or one of its
    children (the role under an init) is stopped."""
    if root not in procs:
        return None
    count = cpu = 0
    pending = [root]
    seen: List[int] = []
    while pending:
        pid = pending.pop()
        count += 1
        cpu += procs[pid][1]
        seen.append(pid)
        pending.extend(children.get(pid, ()))
    leaders = [root] + children.get(root, [])
    return GroupStat(count, cpu, any(procs[pid][2] for pid in leaders), tuple(seen))


def catches(pid: int, signum: int, pgid: int) -> bool:
    """Whether process ``pid``, of process group ``pgid``, runs (not stopped, no zombie)
    and has a handler for signal ``signum`` (``SigCgt`` of ``/proc/<pid>/status``): the
    only process a signal whose default is to end it may be sent to."""
    stat = _stat(pid)
    if stat is None or stat[2] != pgid or stat[0] in ("T", "t"):
        return False
    try:
        with open("/proc/%d/status" % pid) as handle:
            for line in handle:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False
