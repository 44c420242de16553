"""Hosts for the ssh and MPI backends: launch.py's hostfile format, and task placement.

One host a line, as MXNet's ``launch.py`` (dmlc_tracker) and ``mpirun`` read them::

    # comments and blank lines are ignored
    node1                 # a name or an address (user@node1 works too)
    node2:2222            # an ssh port
    node3 slots=2         # at most 2 tasks on node3
    node4:2222 slots=4

``place`` deals the job's tasks to the hosts round-robin in task order (the scheduler,
task 0, on the first host), skipping hosts whose ``slots`` are taken; a host without
``slots=`` takes any number. Given the GPUs each host holds (an allocation's), a host
also takes a task only if it has the GPUs the task asks for left. Errors name the file
and line (``SpecError``, exit 2).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import List, Optional, Sequence

from ...errors import SpecError
from ...spec import inputfile
from ...spec.plan import JobPlan

_HOST = re.compile(r"(?:[A-Za-z0-9._-]+@)?[A-Za-z0-9._-]+")
_FORMS = "expected HOST, HOST:PORT, optionally followed by slots=N"


@dataclasses.dataclass(frozen=True)
class Host:
    """One host: where to ssh (``name``, ``port``) and how many tasks it may run."""

    name: str
    port: Optional[int] = None
    slots: Optional[int] = None

    @property
    def label(self) -> str:
        """How messages name the host: as the user wrote it, without slots."""
        return self.name if self.port is None else f"{self.name}:{self.port}"

    @property
    def entry(self) -> str:
        """The host as a hostfile line (``parse_entry`` reads it back)."""
        return self.label + ("" if self.slots is None else f" slots={self.slots}")


def parse_entry(text: str) -> Host:
    """One hostfile line (without its comment); ValueError saying what is wrong."""
    words = text.split()
    if not words:
        raise ValueError("no host")
    name, port = words[0], None
    if ":" in name:
        name, _, port_text = name.partition(":")
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ValueError(f"bad port {port_text!r} in {text.strip()!r} ({_FORMS})")
        port = int(port_text)
    if not _HOST.fullmatch(name):
        raise ValueError(f"bad host name {name!r} in {text.strip()!r} ({_FORMS})")
    slots = None
    for word in words[1:]:
        key, sep, value = word.partition("=")
        if key != "slots" or not sep:
            raise ValueError(f"unexpected {word!r} in {text.strip()!r} ({_FORMS})")
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"slots must be a whole number of at least 1, got {value!r}")
        slots = int(value)
    return Host(name=name, port=port, slots=slots)


def parse(text: str, path: Path) -> List[Host]:
    """Every host of a hostfile's ``text``; ``SpecError`` at ``path``:line otherwise."""
    hosts = []
    for number, line in enumerate(text.splitlines(), start=1):
        content = line.split("#", 1)[0]
        if not content.strip():
            continue
        try:
            hosts.append(parse_entry(content))
        except ValueError as exc:
            raise SpecError(str(exc), path=path, line=number) from None
    if not hosts:
        raise SpecError("no hosts in the hostfile (one a line: " + _FORMS + ")", path=path)
    return hosts


def load(path: Path) -> List[Host]:
    """The hosts of the hostfile at ``path``."""
    return parse(inputfile.read_text(Path(path), "the hostfile") or "", path)


class GpuShortage(ValueError):
    """The hosts' GPUs cannot hold the tasks that ask for some; ``task``: the index of
    the first task that fits nowhere (None: they ask for more than the hosts hold)."""

    def __init__(self, message: str, task: Optional[int] = None) -> None:
        super().__init__(message)
        self.task = task


def _gpu_list(hosts: Sequence[Host], gpus: Sequence[int]) -> str:
    return ", ".join(f"{h.label}: {n}" for h, n in zip(hosts, gpus))


def place(hosts: Sequence[Host], tasks: int, wants: Sequence[int] = (),
          gpus: Optional[Sequence[int]] = None) -> List[int]:
    """For each of ``tasks`` tasks, the index of its host (see the module docstring).
    ``gpus``: the GPUs each host holds (None: not counted), ``wants``: the GPUs each
    task asks for, in task order. ValueError when the hosts' slots do not add up to
    ``tasks``; GpuShortage when their GPUs cannot hold the tasks'."""
    capacity = sum(h.slots for h in hosts) if all(h.slots for h in hosts) else None
    if capacity is not None and capacity < tasks:
        raise ValueError(f"the job has {tasks} tasks but the hosts offer {capacity} slots")
    asks = [wants[t] if t < len(wants) else 0 for t in range(tasks)]
    free = list(gpus) if gpus is not None else None
    if free is not None and sum(asks) > sum(free):
        raise GpuShortage(f"the job's tasks ask for {sum(asks)} GPUs in all but the hosts "
                          f"hold {sum(free)}")
    used = [0] * len(hosts)
    placement = []
    turn = 0
    for task, want in enumerate(asks):
        for step in range(len(hosts)):
            host = (turn + step) % len(hosts)
            if ((hosts[host].slots is None or used[host] < hosts[host].slots)
                    and (free is None or free[host] >= want)):
                break
        else:
            assert free is not None  # the slots add up, so only GPUs can be short
            raise GpuShortage(f"no host with a free slot has {want} GPUs left for it "
                              f"(left: {_gpu_list(hosts, free)})", task)
        placement.append(host)
        used[host] += 1
        if free is not None:
            free[host] -= want
        turn = (host + 1) % len(hosts)
    return placement


def spec_dir(plan: JobPlan) -> Path:
    """Where relative paths of backend options start: the spec file's folder (the
    current directory for ``mxbatch launch``)."""
    return plan.spec.source.resolve().parent if plan.spec.source else Path.cwd()
