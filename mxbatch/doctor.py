"""``mxbatch doctor``: is this site ready to run a job? Checks as data.

Each check is a ``Check``: what was checked (``name``), the ``outcome``, what was
found (``detail``) and, when it failed, what to do (``fix``). ``run_checks`` runs,
in order: the submitter's Python and mxbatch (the runtime zipapp builds and runs),
MXNet importable by the roles' interpreter, the rendezvous directory (writable, mode
0700), the backend's own checks (``Backend.doctor_checks``: tools, libraries, the
daemon answering), the network (an interface with an address, a free port in the
range) and last the one that matters most on a cluster: a probe job through the real
backend (``probe``) that proves compute nodes see the rendezvous directory and run
the runtime. The probe is skipped when an earlier check of the backend or the
rendezvous directory failed. A skipped check is no failure.

Helpers for backends' checks: ``tool_check`` (a program on PATH), ``command_check``
(a command that must succeed), ``environment_check`` (``Backend.check_environment``
as one check), ``ssh_check`` (ssh in BatchMode), ``mpirun_check`` and
``container_check`` (a container runtime and image).
"""

from __future__ import annotations

import dataclasses
import enum
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Sequence

from . import __version__, bundle
from .errors import MxbatchError
from .runtime import net
from .runtime.roles import Role
from .schema import JobSpec

if TYPE_CHECKING:  # pragma: no cover
    from .backends.base import Backend

#: how long a command a check runs may take
COMMAND_TIMEOUT_S = 30.0
#: how long ``import mxnet`` may take (it is slow on a loaded machine)
MXNET_IMPORT_TIMEOUT_S = 120.0


class Outcome(str, enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"  # not run: it does not apply, or an earlier check failed


@dataclasses.dataclass(frozen=True)
class Check:
    """One check: ``name`` (what), ``outcome``, ``detail`` (what was found), ``fix``
    (what to do; set when it failed)."""

    name: str
    outcome: Outcome
    detail: str
    fix: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome is not Outcome.FAIL

    def to_dict(self) -> Dict[str, object]:
        return {"name": self.name, "outcome": self.outcome.value, "ok": self.ok,
                "detail": self.detail, "fix": self.fix}


def passed(name: str, detail: str) -> Check:
    return Check(name, Outcome.PASS, detail)


def failed(name: str, detail: str, fix: str) -> Check:
    return Check(name, Outcome.FAIL, detail, fix)


def skipped(name: str, detail: str) -> Check:
    return Check(name, Outcome.SKIP, detail)


# --------------------------------------------------------------------------- helpers


def tool_check(tool: str, purpose: str, fix: str,
               environ: Optional[Mapping[str, str]] = None) -> Check:
    """``tool`` is on PATH (``environ``'s PATH when given)."""
    path = shutil.which(tool, path=(environ or os.environ).get("PATH"))
    if path is None:
        return failed(f"{tool} on PATH", f"{tool} ({purpose}) is not on PATH", fix)
    return passed(f"{tool} on PATH", f"{path} ({purpose})")


def command_check(name: str, argv: Sequence[str], fix: str, *,
                  environ: Optional[Mapping[str, str]] = None,
                  timeout: float = COMMAND_TIMEOUT_S, success: str = "",
                  show_output: bool = False) -> Check:
    """``argv`` exits 0 within ``timeout``; its own words otherwise. ``show_output``: the
    last line it printed ends the ``success`` detail."""
    try:
        result = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                                env=dict(environ) if environ is not None else None,
                                stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return failed(name, f"{argv[0]} is not installed (not on PATH)", fix)
    except subprocess.TimeoutExpired:
        return failed(name, f"`{' '.join(argv)}` did not answer within {timeout:g}s", fix)
    except OSError as exc:
        return failed(name, f"cannot run {argv[0]}: {exc.strerror or exc}", fix)
    words = (result.stderr.strip() or result.stdout.strip()).splitlines()
    if result.returncode != 0:
        said = words[-1] if words else "no output"
        return failed(name, f"`{' '.join(argv)}` exited with {result.returncode}: {said}", fix)
    if success and show_output and result.stdout.strip():
        success += " " + result.stdout.strip().splitlines()[-1]
    return passed(name, success or f"`{' '.join(argv)}` answered")


def environment_check(backend: "Backend", name: str = "") -> Check:
    """``backend.check_environment()`` as one check (its message is the fix)."""
    name = name or f"{backend.name} usable from here"
    try:
        backend.check_environment()
    except MxbatchError as exc:
        message = exc.format_message()
        first, _, rest = message.partition("\n")
        return failed(name, first, rest.strip() or first)
    return passed(name, f"tools and libraries of backend {backend.name} found")


def ssh_check(host: str, *, ssh: Sequence[str] = ("ssh",), timeout: float = 15.0) -> Check:
    """``ssh -o BatchMode=yes HOST true`` succeeds: no password, no host-key prompt."""
    argv = [*ssh, "-o", "BatchMode=yes", "-o", f"ConnectTimeout={int(timeout)}", host, "true"]
    return command_check(f"ssh {host}", argv,
                         f"set up key-based login to {host} (ssh-copy-id {host}) and accept "
                         f"its host key once (ssh {host} true), or fix the hostfile",
                         timeout=timeout + 5, success=f"ssh to {host} in BatchMode works")


def mpirun_check(environ: Optional[Mapping[str, str]] = None) -> Check:
    """``mpirun --version`` answers."""
    return command_check("mpirun", ["mpirun", "--version"],
                         "install an MPI (Open MPI: apt-get install openmpi-bin) or put its "
                         "bin directory on PATH", environ=environ,
                         success="mpirun answers")


def container_check(runtime: str, image: str) -> List[Check]:
    """The container runtime answers and has ``image`` (pulled or built)."""
    fix = (f"install {runtime} and make sure this user may use it" if runtime != "docker" else
           "install Docker and start dockerd, or add this user to the docker group")
    checks = [command_check(f"{runtime} runtime", [runtime, "version"], fix)]
    if checks[0].ok:
        inspect = ([runtime, "inspect", image] if runtime == "apptainer"
                   else [runtime, "image", "inspect", image])
        checks.append(command_check(f"{runtime} image {image}", inspect,
                                    f"pull or build it: {runtime} pull {image}",
                                    success=f"image {image} is here"))
    return checks


# --------------------------------------------------------------------------- checks


def python_check() -> Check:
    """The submitter's Python and mxbatch, and the runtime zipapp runs with it."""
    name = "python and mxbatch"
    where = Path(__file__).resolve().parent
    detail = (f"Python {sys.version.split()[0]} at {sys.executable}; mxbatch {__version__} "
              f"at {where}")
    with tempfile.TemporaryDirectory(prefix="mxbatch-doctor-") as scratch:
        runtime = bundle.write_runtime(Path(scratch) / "runtime.pyz")
        result = subprocess.run([sys.executable, "-I", str(runtime), "--help"],
                                capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    if result.returncode != 0:
        return failed(name, f"{detail}; the runtime zipapp does not run: "
                            f"{result.stderr.strip()[-300:]}",
                      "reinstall mxbatch (pip install --force-reinstall mxbatch)")
    return passed(name, detail + "; the runtime zipapp runs")


def role_interpreters(spec: Optional[JobSpec]) -> List[str]:
    """The Python interpreters the roles' commands start (``python3`` without a spec)."""
    if spec is None:
        return ["python3"]
    found: List[str] = []
    for role in Role:
        program = spec.role(role).command[0]
        if os.path.basename(program).startswith("python") and program not in found:
            found.append(program)
    return found


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
    """The rendezvous directory exists (created 0700 if missing), is writable, and is
    not open to other users (mode 0700: run directories hold plans and logs)."""
    base = spec.rendezvous.dir
    name = "rendezvous directory"
    created = not base.exists()
    try:
        base.mkdir(parents=True, exist_ok=True, mode=0o700)
        probe = tempfile.mkdtemp(prefix=".mxbatch-doctor-", dir=base)
        os.rmdir(probe)
    except OSError as exc:
        return failed(name, f"cannot create run directories in {base}: "
                            f"{exc.strerror or exc}",
                      "set rendezvous.dir (job spec or profile) to a directory you can "
                      "write, on storage every compute node sees")
    mode = base.stat().st_mode & 0o777
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


def run_checks(spec: JobSpec, backend_name: str, backend: "Backend", *, probe: bool = True,
               probe_timeout: float = 180.0, with_mxnet: bool = True) -> List[Check]:
    """Every check, in order (see the module docstring)."""
    checks = [python_check()]
    if with_mxnet:
        checks += mxnet_checks(spec)
    storage = rendezvous_check(spec)
    checks.append(storage)
    backend_checks = backend.doctor_checks()
    checks += backend_checks
    checks += network_checks(spec, backend)
    if not probe:
        checks.append(skipped("probe job", "not run (--no-probe)"))
    elif not storage.ok or not all(c.ok for c in backend_checks):
        checks.append(skipped("probe job", "not run: fix the failures above first"))
    else:
        from .probe import probe_checks

        checks += probe_checks(spec, backend_name, probe_timeout)
    return checks


def format_checks(checks: Sequence[Check]) -> str:
    """``PASS  name  detail`` lines, with ``fix:`` under each failure."""
    width = max((len(c.name) for c in checks), default=0)
    lines = []
    for check in checks:
        lines.append(f"{check.outcome.value.upper():<4}  {check.name:<{width}}  {check.detail}")
        if check.outcome is Outcome.FAIL and check.fix:
            lines.append(f"{'':<4}  {'':<{width}}  fix: {check.fix}")
    failures = sum(1 for c in checks if not c.ok)
    lines.append(f"{failures} of {len(checks)} checks failed" if failures
                 else f"all {len(checks)} checks passed")
    return "\n".join(lines) + "\n"
