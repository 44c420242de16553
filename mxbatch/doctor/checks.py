"""Checks as data, and the helpers backends build their own checks from: a leaf that
every backend may import (it imports only ``mxbatch.errors``).

Each check is a ``Check``: what was checked (``name``), the ``outcome``, what was
found (``detail``) and, when it failed, what to do (``fix``). Helpers for backends'
checks: ``tool_check`` (a program on PATH), ``command_check`` (a command that must
succeed), ``environment_check`` (``Backend.check_environment`` as one check),
``ssh_check`` (ssh in BatchMode), ``mpirun_check`` and ``container_check`` (a
container runtime and image). ``mxbatch.doctor.runner`` runs a site's checks.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import shutil
import subprocess
from typing import Dict, List, Mapping, Optional, Protocol, Sequence

from ..errors import MxbatchError


class ChecksItsEnvironment(Protocol):
    """What ``environment_check`` needs of a backend (``backends.base.Backend`` is one)."""

    name: str

    def check_environment(self) -> None: ...

#: how long a command a check runs may take
COMMAND_TIMEOUT_S = 30.0


class Outcome(str, enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"  # not run: it does not apply, or an earlier check failed
    WARN = "warn"  # passed, but something looks wrong (no failure)


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


def warned(name: str, detail: str, fix: str) -> Check:
    return Check(name, Outcome.WARN, detail, fix)


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


def environment_check(backend: ChecksItsEnvironment, name: str = "") -> Check:
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
