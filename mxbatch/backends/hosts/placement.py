"""Placement sources: where a job's tasks may run, as hosts with slots, and which file or
variable said so.

A ``Placement`` is the hosts (``hostfile.Host``, with their slots) and its ``source``,
the words ``render``, ``doctor`` and error messages name it by. Sources:

- a launch.py hostfile or ``backends.<ssh|mpi>.hosts`` (``hostfile.job_hosts``);
- the allocation's node file of a batch system, for ``ssh``/``mpi`` given no hosts
  (``allocation_node_file``): ``PBS_NODEFILE`` (PBS, Torque), ``OAR_NODEFILE`` (OAR: a
  line per core) and ``LSB_DJOB_HOSTFILE`` (LSF), one host a line and a line per slot,
  or LSF's ``LSB_HOSTS`` (the same, blank-separated);
- SGE's ``PE_HOSTFILE`` in a parallel-environment job (``pe_hostfile``): ``HOST SLOTS
  QUEUE PROCESSORS`` a line;
- a Slurm allocation (``slurm_allocation``): ``SLURM_JOB_NODELIST`` expanded by
  ``scontrol show hostnames`` (which asks no daemon), the CPUs of each node from
  ``SLURM_JOB_CPUS_PER_NODE`` (``4(x2),2``); for a job whose roles ask for GPUs, the
  GPUs each node holds for the allocation (``with_slurm_gpus``), from ``scontrol show
  job -d`` (its ``Nodes=... GRES=gpu:2(IDX:0-1)`` lines: the one source for every node,
  since ``salloc`` puts no GPU variable in its shell and an ``sbatch`` script sees its
  own node's only). That asks slurmctld, once, and only for such a job.

Every file is read once, here; a missing or empty one, or one that is not in its format,
is a ``SpecError`` naming the variable and the file (exit 2): nothing is started.
Slots from an allocation are what the batch system granted, so ``hostfile.place``
honours them: a job with more tasks than slots is refused, except in a Slurm
allocation, where roles share a node's CPUs (``srun --overlap``) and only the order
of filling follows them (see ``slurm_allocation``).
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, List, Mapping, Optional, Sequence, Tuple

from ...errors import BackendUnavailable, SpecError
from ...spec.plan import JobPlan
from . import hostfile
from .hostfile import Host, place

if TYPE_CHECKING:  # pragma: no cover
    from ...doctor.checks import Check

#: PBS and Torque: the job's node file, one host a line, a line per slot
PBS_NODEFILE = "PBS_NODEFILE"
#: OAR: the job's node file, one host a line, a line per core
OAR_NODEFILE = "OAR_NODEFILE"
#: LSF: the job's host file, one host a line, a line per slot
LSB_DJOB_HOSTFILE = "LSB_DJOB_HOSTFILE"
#: LSF: the job's hosts, blank-separated, once per slot (when there is no host file)
LSB_HOSTS = "LSB_HOSTS"
#: SGE: the hosts and slots of a parallel-environment job
PE_HOSTFILE = "PE_HOSTFILE"
#: SGE's id of the job (every SGE job has one; PE_HOSTFILE only a parallel one)
SGE_JOB_ID = "JOB_ID"
#: Slurm: the allocation of the shell or script (salloc, sbatch, srun --pty)
SLURM_JOB_ID = "SLURM_JOB_ID"
SLURM_JOB_NODELIST = "SLURM_JOB_NODELIST"
SLURM_JOB_CPUS_PER_NODE = "SLURM_JOB_CPUS_PER_NODE"
#: the node files ``--launcher ssh``/``mpi`` use when given no hosts, in this order
NODE_FILE_VARIABLES = (PBS_NODEFILE, OAR_NODEFILE, LSB_DJOB_HOSTFILE)
#: the ssh client of a node file's batch system, where plain ssh may not reach its nodes
NODE_FILE_STARTERS = {OAR_NODEFILE: "oarsh"}

_REPEAT = re.compile(r"(\d+)(?:\(x(\d+)\))?")
#: a line of ``scontrol show job -d``: some nodes of the job and what each of them holds
_NODE_DETAIL = re.compile(r"^[ \t]*Nodes=(\S+)[ \t](?:[^\n]*[ \t])?GRES=(\S*)", re.MULTILINE)
#: one generic resource in such a line: ``gpu:tesla:2(IDX:0-1,3)``, ``mps:100(0/100)``
_GRES_ITEM = re.compile(r"([A-Za-z0-9_]+)((?::[^:(),]+)*)(?:\(([^)]*)\))?,?")


@dataclasses.dataclass(frozen=True)
class Placement:
    """The hosts a job may use, with their slots, and where they came from."""

    hosts: Tuple[Host, ...]
    #: how messages name the source: "hostfile hosts", "PBS_NODEFILE /var/spool/pbs/42"
    source: str
    #: the GPUs each host holds for the job, in the order of ``hosts`` (None: not counted,
    #: tasks' GPUs are not placed)
    gpus: Optional[Tuple[int, ...]] = None
    #: the client that reaches these hosts instead of plain ssh, when the batch system
    #: has its own (OAR: ``oarsh``); None: ssh
    starter: Optional[str] = None

    def deal(self, tasks: int, wants: Sequence[int] = ()) -> List[int]:
        """For each task, the index of its host (``hostfile.place``); ``wants``: the GPUs
        each task asks for (counted when ``gpus`` is known)."""
        return place(self.hosts, tasks, wants, self.gpus)


def _counted(names: Sequence[str]) -> Tuple[Host, ...]:
    """Hosts in order of first appearance, each with as many slots as it appears."""
    counts: "OrderedDict[str, int]" = OrderedDict()
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return tuple(Host(name=name, slots=n) for name, n in counts.items())


def _read(variable: str, path: str) -> str:
    if not path:
        raise SpecError(f"${variable} is set but empty: no node file to read")
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise SpecError(f"${variable} names {path}, which cannot be read: "
                        f"{exc.strerror or exc}") from None


def _names(variable: str, origin: str, names: Sequence[str]) -> Tuple[Host, ...]:
    bad = [n for n in names if not re.fullmatch(r"[A-Za-z0-9._-]+", n)]
    if bad:
        raise SpecError(f"${variable} ({origin}): {bad[0]!r} is not a host name")
    if not names:
        raise SpecError(f"${variable} ({origin}) lists no hosts: is this the allocation's "
                        "node file?")
    return _counted(names)


def node_file(variable: str, path: str) -> Placement:
    """A PBS/Torque, OAR or LSF node file: one host a line, repeated once per slot."""
    names = [line.split()[0] for line in _read(variable, path).splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    return Placement(_names(variable, path, names), f"{variable} {path}",
                     starter=NODE_FILE_STARTERS.get(variable))


def allocation_node_file(environ: Mapping[str, str]) -> Optional[Placement]:
    """The hosts of the batch allocation this process runs in, from its node file
    (``NODE_FILE_VARIABLES``, then ``LSB_HOSTS``); None outside of one."""
    for variable in NODE_FILE_VARIABLES:
        if variable in environ:
            return node_file(variable, environ[variable])
    if LSB_HOSTS in environ:
        return Placement(_names(LSB_HOSTS, "the variable", environ[LSB_HOSTS].split()),
                         f"{LSB_HOSTS} (the variable)")
    return None


def pe_hostfile(path: str) -> Placement:
    """SGE's ``PE_HOSTFILE``: ``HOST SLOTS QUEUE PROCESSORS`` a line; a host may appear
    once per queue, its slots then add up."""
    hosts: "OrderedDict[str, int]" = OrderedDict()
    for number, line in enumerate(_read(PE_HOSTFILE, path).splitlines(), start=1):
        words = line.split()
        if not words:
            continue
        if len(words) < 2 or not words[1].isdigit() or int(words[1]) < 1:
            raise SpecError(f"${PE_HOSTFILE} ({path}) line {number}: expected "
                            f"'HOST SLOTS QUEUE PROCESSORS', got {line.strip()!r}")
        hosts[words[0]] = hosts.get(words[0], 0) + int(words[1])
    _names(PE_HOSTFILE, path, list(hosts))
    return Placement(tuple(Host(name=h, slots=n) for h, n in hosts.items()),
                     f"{PE_HOSTFILE} {path}")


def expand_repeats(text: str, what: str) -> List[int]:
    """Slurm's ``4(x2),2`` as ``[4, 4, 2]``; SpecError naming ``what`` otherwise."""
    values: List[int] = []
    for part in text.split(","):
        match = _REPEAT.fullmatch(part.strip())
        if not match:
            raise SpecError(f"${what} is {text!r}: expected counts such as 4(x2),2")
        values += [int(match.group(1))] * int(match.group(2) or 1)
    return values


def expand_nodelist(nodelist: str, scontrol: str = "scontrol",
                    what: str = f"${SLURM_JOB_NODELIST}") -> List[str]:
    """Slurm's compressed node list (``mxbh[1-3],gpu7``) as names, by ``scontrol show
    hostnames`` (it only expands: no daemon is asked); ``what``: where the list is from."""
    try:
        result = subprocess.run([scontrol, "show", "hostnames", nodelist], capture_output=True,
                                text=True, timeout=30)
    except FileNotFoundError:
        raise BackendUnavailable(f"{scontrol} is not installed here (needed to read the "
                                 f"allocation's ${SLURM_JOB_NODELIST})") from None
    except subprocess.TimeoutExpired:
        raise BackendUnavailable(f"{scontrol} show hostnames did not answer in 30 s") from None
    names = result.stdout.split()
    if result.returncode != 0 or not names:
        raise SpecError(f"{what} is {nodelist!r}, which {scontrol} cannot "
                        f"expand: {result.stderr.strip() or 'no host names'}")
    return names


def slurm_allocation(environ: Mapping[str, str], tasks: int,
                     scontrol: str = "scontrol") -> Placement:
    """The nodes of the Slurm allocation this process runs in (``SLURM_JOB_ID``).

    Each node's slots are its CPUs in the allocation. When they add up to the job's
    tasks, tasks fill the nodes by them (round-robin, a node with more CPUs takes more);
    when they do not (``salloc -N 3`` grants one CPU a node), the nodes are dealt the
    tasks evenly and the roles of a node share its CPUs: ``source`` says so."""
    nodelist = environ.get(SLURM_JOB_NODELIST) or environ.get("SLURM_NODELIST", "")
    if not nodelist:
        raise SpecError(f"${SLURM_JOB_ID} is set but ${SLURM_JOB_NODELIST} is not: not a "
                        "complete Slurm allocation environment")
    names = expand_nodelist(nodelist, scontrol)
    cpus_text = environ.get(SLURM_JOB_CPUS_PER_NODE, "")
    cpus = expand_repeats(cpus_text, SLURM_JOB_CPUS_PER_NODE) if cpus_text else []
    job = environ.get(SLURM_JOB_ID, "?")
    source = f"Slurm allocation {job} ({SLURM_JOB_NODELIST}={nodelist})"
    if len(cpus) != len(names):
        return Placement(tuple(Host(name=n) for n in names),
                         source + f"; {SLURM_JOB_CPUS_PER_NODE} unknown: tasks dealt evenly")
    if sum(cpus) >= tasks:
        return Placement(tuple(Host(name=n, slots=c) for n, c in zip(names, cpus)), source)
    return Placement(tuple(Host(name=n) for n in names),
                     source + f"; {sum(cpus)} CPUs for {tasks} tasks: roles share a node's "
                              "CPUs")


def _count_indexes(text: str) -> Optional[int]:
    """How many devices ``0-1,3`` names (None: not such a list)."""
    count = 0
    for part in text.split(","):
        low, _, high = part.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            return None
        count += int(high) - int(low) + 1 if high else 1
    return count


def gres_gpus(gres: str) -> int:
    """The GPUs in one node's ``GRES=`` value of ``scontrol show job -d``
    (``gpu:2(IDX:0-1)``, ``gpu:a100:1(IDX:3),gpu:v100:2(IDX:0-1)``, ``gpu(IDX:0-1)``):
    the devices its ``IDX`` names, else its count."""
    total = 0
    for match in _GRES_ITEM.finditer(gres):
        name, colons, detail = match.group(1), match.group(2), match.group(3) or ""
        if name != "gpu":
            continue
        indexes = _count_indexes(detail[4:]) if detail.startswith("IDX:") else None
        if indexes is not None:
            total += indexes
            continue
        last = colons.rsplit(":", 1)[-1] if colons else ""
        total += int(last) if last.isdigit() else 1
    return total


def job_gpus(text: str) -> List[Tuple[str, int]]:
    """``scontrol show job -d``'s per-node lines as (node list, GPUs of each of its
    nodes), in order: ``Nodes=mxbh[1-2] CPU_IDs=0 Mem=0 GRES=gpu:2(IDX:0-1)`` is
    ``("mxbh[1-2]", 2)``."""
    return [(m.group(1), gres_gpus(m.group(2))) for m in _NODE_DETAIL.finditer(text)]


def with_slurm_gpus(found: Placement, job: str, scontrol: str = "scontrol") -> Placement:
    """``found`` (a Slurm allocation's nodes) with the GPUs each node holds for allocation
    ``job``, from ``scontrol show job -d JOB`` (asks slurmctld); BackendUnavailable when
    it cannot answer."""
    argv = [scontrol, "show", "job", "-d", job]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise BackendUnavailable(f"{scontrol} is not installed here (needed to read the "
                                 "GPUs of the allocation)") from None
    except subprocess.TimeoutExpired:
        raise BackendUnavailable(f"{' '.join(argv)} did not answer in 30 s (needed to read "
                                 "the GPUs of the allocation)") from None
    if result.returncode != 0:
        raise BackendUnavailable(f"{' '.join(argv)} failed (needed to read the GPUs of the "
                                 f"allocation): {result.stderr.strip() or result.stdout.strip()}")
    held: "OrderedDict[str, int]" = OrderedDict()
    for nodes, gpus in job_gpus(result.stdout):
        names = (expand_nodelist(nodes, scontrol, f"scontrol show job -d {job}: Nodes=")
                 if "[" in nodes else nodes.split(","))
        for name in names:
            held[name] = held.get(name, 0) + gpus
    counts = tuple(held.get(h.name, 0) for h in found.hosts)
    listed = ", ".join(f"{h.name} {n}" for h, n in zip(found.hosts, counts))
    return dataclasses.replace(found, gpus=counts,
                               source=found.source + f"; GPUs (scontrol show job -d): {listed}")


def job_hosts(plan: JobPlan, backend: str, entries: Tuple[str, ...],
              path: Optional[str], environ: Optional[Mapping[str, str]] = None
              ) -> Placement:
    """The hosts of a job from ``backends.<backend>.hosts`` or ``.hostfile`` (at most one
    of them), else from the node file of the batch allocation this process runs in
    (``allocation_node_file``), checked against the job's size; SpecError naming the
    key, file or line, or the variable and its file."""
    key = ("backends", backend)
    if entries and path:
        raise plan.spec.error(key + ("hosts",), "give hosts or hostfile, not both")
    tasks = len(plan.run.tasks)
    if not path and not entries:
        found = allocation_node_file(os.environ if environ is None else environ)
        if found is None:
            raise plan.spec.error(key, "no hosts: give a hostfile (mxbatch launch -H HOSTFILE, "
                                       f"backends.{backend}.hostfile) or backends.{backend}.hosts"
                                       ", or run inside a batch allocation ("
                                       + ", ".join(NODE_FILE_VARIABLES + (LSB_HOSTS,)) + ")")
        try:
            found.deal(tasks)
        except ValueError as exc:
            raise SpecError(f"{found.source}: {exc} (one a line of the node file): ask the "
                            "batch system for more, or run fewer tasks; nothing was "
                            "started") from None
        return found
    if path:
        full = hostfile.spec_dir(plan) / Path(path).expanduser()
        found = Placement(tuple(hostfile.load(full)), f"hostfile {full}")
    else:
        hosts = []
        for i, entry in enumerate(entries):
            try:
                hosts.append(hostfile.parse_entry(entry))
            except ValueError as exc:
                raise plan.spec.error(key + ("hosts", i), str(exc)) from None
        found = Placement(tuple(hosts), f"backends.{backend}.hosts")
    try:
        found.deal(tasks)
    except ValueError as exc:
        raise plan.spec.error(key + ("hostfile" if path else "hosts",), str(exc),
                              "raise slots=, add hosts, or remove slots= to allow any "
                              "number") from None
    return found


def hosts_check(backend: str, entries: Tuple[str, ...], path: Optional[str],
                environ: Optional[Mapping[str, str]] = None) -> "Check":
    """``mxbatch doctor``'s word on where the hosts of backend ``backend`` come from: the
    spec's hosts or hostfile, or the allocation's node file (which one, its hosts and
    slots)."""
    from ...doctor.checks import failed, passed

    name = "hosts"
    if entries or path:
        where = f"hostfile {path}" if path else f"backends.{backend}.hosts"
        return passed(name, f"from {where} (the spec)")
    fix = (f"give -H HOSTFILE, backends.{backend}.hostfile or backends.{backend}.hosts, or "
           "run inside a batch allocation")
    try:
        found = allocation_node_file(os.environ if environ is None else environ)
    except SpecError as exc:
        return failed(name, exc.format_message(), "point the variable at the allocation's "
                                                  "node file, or " + fix)
    if found is None:
        return failed(name, "no hosts in the spec, and no allocation node file ("
                            + ", ".join(NODE_FILE_VARIABLES + (LSB_HOSTS,)) + ")", fix)
    slots = sum(h.slots or 0 for h in found.hosts)
    return passed(name, f"from {found.source}: {len(found.hosts)} hosts, {slots} slots")
