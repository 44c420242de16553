"""``mxbatch doctor``: is this site ready to run a job?

``run_checks`` runs, in order: the submitter's Python and mxbatch (the runtime zipapp
builds and runs), MXNet importable by the roles' interpreter, the rendezvous directory
(writable, mode 0700), the backend's own checks (``Backend.doctor_checks``: tools,
libraries, the daemon answering), the network (an interface with an address, a free
port in the range) and last the one that matters most on a cluster: a probe job
through the real backend (``probe``) that proves compute nodes see the rendezvous
directory and run the runtime. The probe is skipped when an earlier check of the
backend or the rendezvous directory failed. A skipped check is no failure.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional, Sequence

import mxbatch

from .. import __version__
from ..backends import bundle, rundir
from ..errors import MxbatchError
from ..jobs.scripts import missing_scripts, script_of
from ..runtime import cgroups, limits, net, trust, wire
from ..runtime.layout import RUNTIME
from ..runtime.roles import Role
from ..spec.paths import make_private_dirs
from ..spec.schema import JobSpec
from .checks import (
    COMMAND_TIMEOUT_S,
    Check,
    Outcome,
    command_check,
    failed,
    passed,
    skipped,
    warned,
)
from .probe import probe_checks, role_interpreters

if TYPE_CHECKING:  # pragma: no cover
    from ..backends.base import Backend

#: how long ``import mxnet`` may take (it is slow on a loaded machine)
MXNET_IMPORT_TIMEOUT_S = 120.0



def containment_check() -> Check:
    """How this machine's supervisors find every process of a job (``cgroups.probe``):
    a cgroup v2 per task, or process groups and the environment scan (a warning: a
    process that leaves its session and clears its environment escapes it)."""
    found = cgroups.probe()
    if found.containment is cgroups.Containment.CGROUP:
        return passed("containment", found.detail)
    return warned("containment", found.detail,
                  "run mxbatch as root, or where systemd delegates a cgroup subtree to "
                  f"your user (a user session); {wire.CGROUPS}=off turns cgroups off")


def python_check() -> Check:
    """The submitter's Python and mxbatch, and the runtime zipapp runs with it."""
    name = "python and mxbatch"
    where = Path(mxbatch.__file__).resolve().parent
    detail = (f"Python {sys.version.split()[0]} at {sys.executable}; mxbatch {__version__} "
              f"at {where}")
    with tempfile.TemporaryDirectory(prefix="mxbatch-doctor-") as scratch:
        runtime = bundle.write_runtime(Path(scratch) / RUNTIME)
        result = subprocess.run([sys.executable, "-I", str(runtime), "--help"],
                                capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    if result.returncode != 0:
        return failed(name, f"{detail}; the runtime zipapp does not run: "
                            f"{result.stderr.strip()[-300:]}",
                      "reinstall mxbatch (pip install --force-reinstall mxbatch)")
    return passed(name, detail + "; the runtime zipapp runs")


def mxnet_checks(spec: Optional[JobSpec]) -> List[Check]:
    """Each roles' interpreter, found on this PATH, imports mxnet."""
    interpreters = role_interpreters(spec)
    if not interpreters:
        return [skipped("mxnet importable", "the roles' commands do not start Python")]
    checks = []
    for program in interpreters:
        name = f"mxnet importable by {program}"
        path = shutil.which(program)
        if path is None:
            checks.append(failed(name, f"{program} is not on PATH",
                                 "activate the environment the roles use, or give the "
                                 "command's interpreter by its full path"))
            continue
        checks.append(command_check(
            name, [path, "-c", "import mxnet; print(mxnet.__version__)"],
            f"install MXNet for that interpreter: {path} -m pip install 'mxnet==1.9.1' "
            "'numpy<1.24' (or pip install 'mxbatch[mxnet]' in its venv)",
            timeout=MXNET_IMPORT_TIMEOUT_S, success=f"{path} imports mxnet",
            show_output=True))
    return checks


def rendezvous_check(spec: JobSpec) -> Check:
    """The rendezvous directory exists (created 0700 if missing), is writable, no other
    user can change it or a folder above it (``runtime.trust``: failed before anything
    is created; a warning where the site config sets ``rendezvous.trust_shared``), and
    it is not open to other users unless it is a root-owned sticky scratch folder (mode
    0700: run directories hold plans and logs)."""
    base = spec.rendezvous.dir
    name = "rendezvous directory"
    found = trust.untrusted_folder(str(base))
    if found is not None and not spec.rendezvous.trust_shared:
        return failed(name, f"{found.describe()}: another user could replace a run "
                            "directory there and run code as you", rundir.TRUST_FIX)
    created = not base.exists()
    try:
        make_private_dirs(base)
        probe = tempfile.mkdtemp(prefix=".mxbatch-doctor-", dir=base)
        os.rmdir(probe)
    except OSError as exc:
        return failed(name, f"cannot create run directories in {base}: "
                            f"{exc.strerror or exc}",
                      "set rendezvous.dir (job spec or profile) to a directory you can "
                      "write, on storage every compute node sees")
    if found is not None:
        return warned(name, f"{found.describe()}, trusted by the site config "
                            "(rendezvous.trust_shared): whoever can write there can run "
                            "code as every user of this folder",
                      "unset rendezvous.trust_shared unless only trusted users can write "
                      "there; " + rundir.TRUST_FIX.split("; ")[0])
    info = base.stat()
    mode = stat.S_IMODE(info.st_mode)
    if info.st_uid == 0 and mode & stat.S_ISVTX:
        return passed(name, f"{base} is writable, a root-owned scratch folder (mode "
                            f"{mode:04o}): run directories in it are 0700")
    if mode & 0o077:
        return failed(name, f"{base} is writable but has mode {mode:04o}: other users can "
                            "read (or change) job plans and logs",
                      f"chmod 700 {base}")
    return passed(name, f"{base} is writable, mode 0700" + (" (created)" if created else ""))


def network_checks(spec: JobSpec, backend: "Backend") -> List[Check]:
    """An address to advertise, and a free port of the range, here."""
    interface = spec.network.interface
    if interface:
        try:
            ip = net.interface_ip(interface)
            address = passed("network interface", f"{interface} has {ip}")
        except net.NetworkError as exc:
            return [failed("network interface", str(exc),
                           "set network.interface to one of: "
                           + ", ".join(net.interface_names()))]
    elif backend.loopback_only:
        ip = "127.0.0.1"
        address = passed("network interface", "127.0.0.1 (every task runs on this machine)")
    else:
        route = net.default_route_interface()
        if route is None:
            return [failed("network interface", "no default route: tasks cannot tell which "
                                                "address to advertise",
                           "set network.interface to the interface of the cluster network "
                           "(one of: " + ", ".join(net.interface_names()) + ")")]
        try:
            ip = net.interface_ip(route)
        except net.NetworkError as exc:
            return [failed("network interface", str(exc), "set network.interface")]
        address = passed("network interface", f"{route} (default route) has {ip}; set "
                                              "network.interface if the nodes talk on "
                                              "another network")
    low, high = spec.network.port_low, spec.network.port_high
    port = next(net.candidate_ports(low, high, ip), None)
    if port is None:
        return [address, failed("free port", f"no free port in {low}-{high} on {ip}",
                                "choose another range: network.ports")]
    return [address, passed("free port", f"port {port} of {low}-{high} is free on {ip} "
                                         "(on this machine)")]


def script_checks(spec: JobSpec, backend: "Backend") -> List[Check]:
    """The training script of the spec's commands is in its workdir (a warning if not;
    skipped where the roles' workdir is not this machine's)."""
    name = "training script"
    scripts = sorted({s for s in (script_of(spec.role(r).command) for r in Role) if s})
    if not scripts:
        return [skipped(name, "the roles' commands run no Python script (python3 X.py)")]
    if not backend.workdir_is_here():
        return [skipped(name, f"the roles' workdir is on the {backend.name} hosts, not "
                              "checked from here")]
    missing = missing_scripts(spec)
    if missing:
        return [warned(name, "; ".join(m.message() for m in missing),
                       "fix the command's script path, or workdir (relative paths are "
                       "taken in the workdir)")]
    return [passed(name, ", ".join(scripts) + f" found in {spec.workdir}")]


def capacity_checks(spec: JobSpec, backend_name: str, backend: "Backend") -> List[Check]:
    """Whether the machines can hold the spec's job (``Backend.capacity_warnings``: the
    local backend's cores and memory; a warning), and, on the local backend, how a
    role's memory and cpus are enforced here (``runtime.limits``)."""
    from ..spec import plan as planning

    try:
        plan = planning.make(spec, backend_name, loopback_only=backend.loopback_only,
                             max_tasks=backend.max_tasks)
    except MxbatchError as exc:
        return [skipped("capacity", f"the spec's plan: {exc}")]
    found = backend.capacity_warnings(plan)
    checks = [warned("capacity", "; ".join(found), "fewer or smaller roles "
                     "(roles.<role>.count, resources), or a cluster backend")
              if found else passed("capacity", f"the {len(plan.run.tasks)} tasks' cores and "
                                               "memory fit the machine")]
    if limits.applies(backend.loopback_only):
        probe = cgroups.probe()
        agent = cgroups.own_directory() if probe.containment is cgroups.Containment.CGROUP else None
        memory, cpus = limits.describe_here(agent)
        detail = ("memory: cgroup memory.max" if memory is limits.Means.CGROUP else
                  "memory: RLIMIT_DATA (no cgroup memory controller): a role's private "
                  "data (heap, anonymous maps), not its resident memory")
        detail += ("; cpus: cgroup cpu.max" if cpus is limits.Means.CGROUP else
                   "; cpus: not enforced (no cgroup cpu controller; OMP_NUM_THREADS only)")
        checks.append(passed("role limits", detail) if cpus is limits.Means.CGROUP
                      else warned("role limits", detail,
                                  "run where a cgroup v2 with the cpu and memory "
                                  "controllers is delegated to mxbatch (root on a unified "
                                  "cgroup machine, or systemd-run --user --scope -p "
                                  "Delegate=yes)"))
    return checks


def run_checks(spec: JobSpec, backend_name: str, backend: "Backend", *, probe: bool = True,
               probe_timeout: float = 180.0, with_mxnet: bool = True,
               with_script: bool = False) -> List[Check]:
    """Every check, in order (see the module docstring); ``with_script``: the spec's
    training script too (a SPEC was given)."""
    checks = [python_check()]
    if with_script:
        checks += script_checks(spec, backend)
        checks += capacity_checks(spec, backend_name, backend)
    if with_mxnet:
        checks += mxnet_checks(spec)
    storage = rendezvous_check(spec)
    checks.append(storage)
    checks.append(containment_check())
    backend_checks = backend.doctor_checks()
    checks += backend_checks
    checks += network_checks(spec, backend)
    if not probe:
        checks.append(skipped("probe job", "not run (--no-probe)"))
    elif not storage.ok or not all(c.ok for c in backend_checks):
        checks.append(skipped("probe job", "not run: fix the failures above first"))
    else:
        checks += probe_checks(spec, backend_name, probe_timeout)
    return checks


def format_checks(checks: Sequence[Check]) -> str:
    """``PASS  name  detail`` lines, with ``fix:`` under each failure."""
    width = max((len(c.name) for c in checks), default=0)
    lines = []
    for check in checks:
        lines.append(f"{check.outcome.value.upper():<4}  {check.name:<{width}}  {check.detail}")
        if check.outcome in (Outcome.FAIL, Outcome.WARN) and check.fix:
            lines.append(f"{'':<4}  {'':<{width}}  fix: {check.fix}")
    failures = sum(1 for c in checks if not c.ok)
    lines.append(f"{failures} of {len(checks)} checks failed" if failures
                 else f"all {len(checks)} checks passed")
    return "\n".join(lines) + "\n"
