"""DRMAA glue shared by the SGE and Slurm backends.

The ``drmaa`` package is never imported into the CLI process: DRMAA calls run in
a short-lived helper (``python -m mxbatch.backends.batch.drmaa OP``, JSON on stdin and
stdout) whose environment carries what the library needs. Debian's SGE
libdrmaa links libjemalloc, which fails to load ("cannot allocate memory in
static TLS block") unless the process *starts* with a larger static TLS
surplus (``GLIBC_TUNABLES``): the helper gets it, so users never see it. Once the
session is up, the helper puts back the submitting environment (without what it
added for itself) before it submits: SGE's ``-V`` and slurm-drmaa (which always
passes the submitting process's environment on) copy it into every task.

Job templates are built here from plain data (``TemplateSpec``), so their
construction is unit-tested without a DRMAA library.

A DRMAA library drives one scheduler, and ``DRMAA_LIBRARY_PATH`` may name another's
(a site that loads both schedulers' modules: Grid Engine's libdrmaa with ``--backend
slurm`` turns Slurm options into Grid Engine's, which refuses them). ``identify`` asks
the library (``drmsInfo``, ``drmaa_get_DRM_system``, before any session, in the helper
process) which scheduler it drives; ``auto_uses_drmaa`` and ``check_library`` decide
from that (``DrmSystem``).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import glob
import importlib.util
import json
import os
import re
import sys
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ... import shell
from ...errors import BackendUnavailable, CommandError, SubmissionRejected

STATIC_TLS_TUNABLE = "glibc.rtld.optional_static_tls=1000000"
#: the ``submitter`` option value that selects DRMAA, on every backend that offers it
SUBMITTER = "drmaa"
HELPER_TIMEOUT_S = 120.0
#: how long asking a library which scheduler it drives may take (slurm-drmaa asks
#: slurmctld for its version)
IDENTIFY_TIMEOUT_S = 30.0


class DrmSystem(str, enum.Enum):
    """A scheduler a DRMAA library may drive."""

    GRID_ENGINE = "Grid Engine"
    SLURM = "Slurm"

    @classmethod
    def named_in(cls, drms_info: str) -> Optional["DrmSystem"]:
        """The scheduler a library's ``drmsInfo`` names ("SGE 8.1.9", "UGE 8.6.4",
        "OGS/GE 2011.11", "SLURM 23.02.6", "SLURM"); None for any other."""
        words = drms_info.upper()
        if re.search(r"\bSLURM\b", words):
            return cls.SLURM
        if re.search(r"\b(SGE|UGE|OGS|AGE|GE)\b|GRID ?ENGINE", words):
            return cls.GRID_ENGINE
        return None


@dataclasses.dataclass(frozen=True)
class LibraryIdentity:
    """What a DRMAA library said it drives (``drms_info``), or why it could not say."""

    library: str
    drms_info: str = ""
    problem: str = ""

    @property
    def system(self) -> Optional[DrmSystem]:
        return DrmSystem.named_in(self.drms_info) if not self.problem else None

    def describe(self) -> str:
        """The library and what it is, for a message."""
        if self.problem:
            return f"{self.library}, which cannot say what it drives ({self.problem})"
        system = self.system
        return (f"{self.library}, whose DRM system is {self.drms_info!r} ("
                + (f"a {system.value} library)" if system else "no scheduler mxbatch knows)"))


@dataclasses.dataclass(frozen=True)
class TemplateSpec:
    """One bulk job: what ``runBulkJobs(jt, 1, count, 1)`` gets."""

    remote_command: str
    args: List[str]
    job_name: str
    native: str
    output_path: str  # ':'-prefixed, may contain $drmaa_incr_ph$
    working_directory: str
    count: int
    join_files: bool = True
    #: variables every task gets (the DRMAA job environment)
    environment: Dict[str, str] = dataclasses.field(default_factory=dict)


def library_candidates(environ: Mapping[str, str]) -> List[str]:
    """Where a DRMAA library may be, most specific first."""
    found = []
    if environ.get("DRMAA_LIBRARY_PATH"):
        found.append(environ["DRMAA_LIBRARY_PATH"])
    sge_root = environ.get("SGE_ROOT")
    if sge_root:
        found += sorted(glob.glob(os.path.join(sge_root, "lib", "*", "libdrmaa.so*")))
    found += sorted(glob.glob("/usr/lib/gridengine-drmaa/lib/libdrmaa.so*"))
    found += sorted(glob.glob("/usr/lib/*-linux-gnu/libdrmaa.so*"))
    found += sorted(glob.glob("/usr/local/lib/libdrmaa.so*"))
    return found


def find_library(environ: Mapping[str, str]) -> Optional[str]:
    for path in library_candidates(environ):
        if os.path.exists(path):
            return path
    return None


def python_binding_available() -> bool:
    return importlib.util.find_spec("drmaa") is not None


def helper_environment(environ: Mapping[str, str], library: str) -> Dict[str, str]:
    """The helper's environment: ``environ`` plus the library's path and the TLS tunable."""
    env = dict(environ)
    env["DRMAA_LIBRARY_PATH"] = library
    tunables = [t for t in env.get("GLIBC_TUNABLES", "").split(":")
                if t and not t.startswith("glibc.rtld.optional_static_tls=")]
    env["GLIBC_TUNABLES"] = ":".join(tunables + [STATIC_TLS_TUNABLE])
    return env


class DrmaaClient:
    """Runs DRMAA operations through the helper process.

    ``environ``: the submitting environment, what the jobs see of it (``-V``); the
    helper process runs with it plus what the library needs (``helper_environment``).
    ``unavailable_hint``: what to check when the library cannot reach the scheduler.
    """

    def __init__(self, library: str, scheduler: str, environ: Mapping[str, str],
                 unavailable_hint: str = "") -> None:
        self.library = library
        self.scheduler = scheduler
        self.environ = dict(environ)
        self.env = helper_environment(environ, library)
        self.unavailable_hint = unavailable_hint

    def _call(self, operation: str, payload: dict) -> dict:
        try:
            result = shell.run([sys.executable, "-m", "mxbatch.backends.batch.drmaa", operation],
                               input_text=json.dumps(payload), env=self.env,
                               timeout=HELPER_TIMEOUT_S, check=False)
        except CommandError as exc:
            raise BackendUnavailable(f"the DRMAA helper did not answer: {exc}") from None
        try:
            answer = json.loads(result.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise BackendUnavailable(
                f"the DRMAA helper failed (library {self.library}):\n{result.stderr.strip()}"
            ) from None
        if "error" in answer:
            kind, message = answer.get("kind", ""), answer["error"]
            if kind in ("DeniedByDrmException", "InvalidAttributeValueException",
                        "InvalidAttributeFormatException"):
                raise SubmissionRejected(f"{self.scheduler} rejected the job: {message}\n"
                                         "check the backend options and native "
                                         "specification (nothing was left queued)")
            raise BackendUnavailable(f"DRMAA ({self.library}) failed: {kind}: {message}\n"
                                     + (self.unavailable_hint or "is the cluster up?"))
        return answer

    def submit(self, templates: Sequence[TemplateSpec]) -> List[List[str]]:
        """Submit every template (all or nothing); job ids per template."""
        answer = self._call("submit", {"templates": [dataclasses.asdict(t) for t in templates],
                                       "environ": self.environ})
        return answer["job_ids"]

    def terminate(self, job_ids: Sequence[str]) -> None:
        self._call("terminate", {"job_ids": list(job_ids)})


def identify(library: str, environ: Mapping[str, str]) -> LibraryIdentity:
    """Which scheduler ``library`` drives, asked in the helper process with ``environ``
    (Grid Engine's library needs ``SGE_ROOT``); once per library and environment."""
    return _identify(library, tuple(sorted(environ.items())))


@functools.lru_cache(maxsize=16)
def _identify(library: str, environ: Tuple[Tuple[str, str], ...]) -> LibraryIdentity:
    try:
        result = shell.run([sys.executable, "-m", "mxbatch.backends.batch.drmaa", "system"],
                           input_text="{}", env=helper_environment(dict(environ), library),
                           timeout=IDENTIFY_TIMEOUT_S, check=False)
    except CommandError as exc:
        return LibraryIdentity(library, problem=f"the DRMAA helper did not answer: {exc}")
    try:
        answer = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return LibraryIdentity(library, problem=result.stderr.strip() or "no answer")
    if "error" in answer:
        return LibraryIdentity(library, problem=f"{answer.get('kind', '')}: {answer['error']}")
    return LibraryIdentity(library, drms_info=str(answer.get("drms_info", "")))


def auto_uses_drmaa(identity: Optional[LibraryIdentity], own: DrmSystem) -> bool:
    """``submitter: auto``: DRMAA only through a library (``identity``, None: no library
    or no binding) that drives the backend's ``own`` scheduler; else its own CLI."""
    return identity is not None and identity.system is own


def check_library(identity: LibraryIdentity, own: DrmSystem, native: str) -> None:
    """``submitter: drmaa``: ``BackendUnavailable`` (exit 3) naming the library and what
    it is when it says it drives another scheduler than ``own`` (or none mxbatch knows);
    ``native``: the submitter that needs no library. A library that cannot say (Grid
    Engine's without a reachable cell) passes: its first real call fails with the
    scheduler's own words, which say more than "cannot say"."""
    if identity.system is own or identity.problem:
        return
    raise BackendUnavailable(
        f"submitter drmaa: the DRMAA library is {identity.describe()}, not a {own.value} "
        f"library: set DRMAA_LIBRARY_PATH to {own.value}'s DRMAA library, or use "
        f"submitter: {native} (or auto)")


# ------------------------------------------------------------------ helper process side


def use_environment(environ: Mapping[str, str]) -> None:
    """Make this process's environment exactly ``environ`` (the C library's too: what
    the DRMAA library copies into jobs when it submits)."""
    os.environ.clear()
    os.environ.update(environ)


def _submit(session, drmaa, payload: dict) -> dict:
    submitted: List[List[str]] = []
    if "environ" in payload:
        use_environment(payload["environ"])
    try:
        for spec in payload["templates"]:
            template = session.createJobTemplate()
            try:
                template.remoteCommand = spec["remote_command"]
                template.args = spec["args"]
                template.jobName = spec["job_name"]
                template.nativeSpecification = spec["native"]
                template.outputPath = spec["output_path"]
                template.joinFiles = spec["join_files"]
                template.workingDirectory = spec["working_directory"]
                if spec["environment"]:
                    template.jobEnvironment = spec["environment"]
                ids = session.runBulkJobs(template, 1, spec["count"], 1)
            finally:
                session.deleteJobTemplate(template)
            submitted.append(list(ids))
    except Exception:
        for ids in submitted:
            for job_id in ids:
                try:
                    session.control(job_id, drmaa.JobControlAction.TERMINATE)
                except Exception:  # already gone: nothing to undo
                    pass
        raise
    return {"job_ids": submitted}


def _terminate(session, drmaa, payload: dict) -> dict:
    for job_id in payload["job_ids"]:
        try:
            session.control(job_id, drmaa.JobControlAction.TERMINATE)
        except drmaa.errors.InvalidJobException:
            pass
    return {"ok": True}


def helper_main(argv: Sequence[str]) -> int:
    operation = argv[0] if argv else ""
    try:
        import drmaa  # only ever in this helper process, never in the CLI

        payload = json.loads(sys.stdin.read() or "{}")
        if operation == "system":  # before any session: what the library drives
            sys.stdout.write("\n" + json.dumps({"drms_info": str(drmaa.Session.drmsInfo)})
                             + "\n")
            return 0
        with drmaa.Session() as session:
            handler = {"submit": _submit, "terminate": _terminate}[operation]
            answer = handler(session, drmaa, payload)
    except Exception as exc:  # any DRMAA failure is reported to the parent as data
        answer = {"error": str(exc).strip(), "kind": type(exc).__name__}
    sys.stdout.write("\n" + json.dumps(answer) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(helper_main(sys.argv[1:]))
