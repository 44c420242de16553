"""Whether this machine can hold a job whose every task runs on it (the local backend):
the cores and memory its tasks ask for, against the machine's.

``shortfalls`` gives one sentence per resource the job asks more of than the machine
has (``submit``, ``launch`` warn with them; ``mxbatch doctor SPEC`` shows them as a
warning): every task of a parameter-server job runs at once, so they add up. Tasks
that name no ``memory`` count for none.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import List, Optional

from ..runtime.planfile import RunPlan

MIB = 1 << 20


@dataclass(frozen=True)
class Machine:
    """What this machine offers: the cores this process may run on, its memory (MiB;
    None when unknown)."""

    cores: int
    memory_mib: Optional[int]

    @classmethod
    def here(cls) -> "Machine":
        try:
            cores = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cores = os.cpu_count() or 1
        memory = None
        try:
            with open("/proc/meminfo") as handle:
                for line in handle:
                    if line.startswith("MemTotal:"):
                        memory = int(line.split()[1]) // 1024
        except (OSError, ValueError, IndexError):
            pass
        return cls(cores, memory)


def _size(mib: int) -> str:
    return f"{mib / 1024:.1f} GiB" if mib >= 1024 else f"{mib} MiB"


def shortfalls(run: RunPlan, machine: Optional[Machine] = None) -> List[str]:
    """What ``run``'s tasks, all at once, ask of ``machine`` (default: this one) beyond
    what it has; empty when it holds them."""
    machine = machine or Machine.here()
    found = []
    tasks = len(run.tasks)
    memory = sum(t.memory_mib for t in run.tasks if t.memory_mib)
    if machine.memory_mib is not None and memory > machine.memory_mib:
        found.append(f"the {tasks} tasks ask for {_size(memory)} of memory in all; this "
                     f"machine has {_size(machine.memory_mib)}: roles will fail when they "
                     "reach their memory limit, or the machine runs out first")
    cpus = sum(t.cpus for t in run.tasks)
    if cpus > machine.cores:
        found.append(f"the {tasks} tasks ask for {cpus} CPU cores in all; this machine has "
                     f"{machine.cores}: they share them, each slower than asked")
    return found
