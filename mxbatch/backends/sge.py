"""SGE backend (Son of Grid Engine, Univa/Altair GE): one array job per role group.

Submitted through DRMAA ``runBulkJobs`` when a DRMAA library and the ``drmaa``
package are available (``submitter: drmaa``), else ``qsub -t 1-N`` of a job
script rendered from ``jobscripts/sge.sh`` (``submitter: qsub``). Status comes
from ``qstat -xml`` for both (a later CLI process has no DRMAA session), cancel
from DRMAA terminate or ``qdel``.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import re
import shutil
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from ..errors import BackendUnavailable
from ..plan import JobPlan
from ..runtime.layout import RunLayout
from ..runtime.planfile import RunPlan
from ..runtime.roles import Role
from ..status import NativeState, TaskKey
from ..typed import option
from ..units import format_duration
from . import drmaa as drmaa_glue
from .base import Handle, Rollback
from .batch import (
    BatchBackend,
    BatchRequest,
    Directive,
    RoleGroup,
    job_name,
    native_directives,
    parse_task_ranges,
)

QSUB_JOB_ID = re.compile(r"^(?P<job_id>\d+)(?:\.\d+-\d+:\d+)?\s*$", re.MULTILINE)
QMASTER_DOWN = re.compile(r"unable to contact qmaster|commlib error|can't (?:find|read) "
                          r"act_qmaster|cell directory .* doesn't exist", re.IGNORECASE)

#: SGE state letters -> what the queue says of a task (first match wins)
NATIVE_STATES: Tuple[Tuple[str, NativeState], ...] = (
    ("E", NativeState.GONE),      # error state: it will never run; treated as lost
    ("d", NativeState.ACTIVE),    # being deleted
    ("r", NativeState.ACTIVE), ("t", NativeState.ACTIVE), ("s", NativeState.ACTIVE),
    ("S", NativeState.ACTIVE), ("T", NativeState.ACTIVE),
    ("q", NativeState.QUEUED), ("h", NativeState.QUEUED), ("w", NativeState.QUEUED),
)


class Submitter(str, enum.Enum):
    AUTO = "auto"
    DRMAA = drmaa_glue.SUBMITTER
    QSUB = "qsub"


@dataclasses.dataclass(frozen=True)
class SgeOptions:
    """``backends.sge``."""

    submitter: Submitter = option(Submitter.AUTO, "how to submit: drmaa (DRMAA runBulkJobs), "
                                  "qsub, or auto (DRMAA when a library is found)")
    queue: Optional[str] = option(None, "the queue (-q)")
    pe: str = option("smp", "the parallel environment that grants a role's cpus (-pe PE N)")
    project: Optional[str] = option(None, "the project (-P)")
    memory_resource: str = option("h_vmem", "the per-slot memory resource (-l NAME=...)")
    gpu_resource: str = option("gpu", "the GPU consumable (-l NAME=N)")
    native: Tuple[str, ...] = option((), "more qsub options, passed last and unchanged")


@dataclasses.dataclass(frozen=True)
class SgeHandle(Handle):
    """The array job of each role group, and how they were submitted."""

    submitter: Submitter
    job_ids: Dict[Role, str]


def native_state(letters: str) -> NativeState:
    for letter, state in NATIVE_STATES:
        if letter in letters:
            return state
    return NativeState.UNKNOWN


def parse_qstat_xml(text: str) -> Dict[Tuple[str, int], str]:
    """``{(job number, task id): state letters}`` from ``qstat -xml -g d``."""
    states: Dict[Tuple[str, int], str] = {}
    root = ElementTree.fromstring(text)
    for job in root.iter("job_list"):
        number = (job.findtext("JB_job_number") or "").strip()
        letters = (job.findtext("state") or "").strip()
        tasks = (job.findtext("tasks") or "").strip()
        for task_id in parse_task_ranges(tasks) if tasks else [1]:
            states[(number, task_id)] = letters
    return states


class SgeBackend(BatchBackend[SgeHandle]):
    name = "sge"
    script_template = "sge.sh"
    directive_prefix = "#$"
    output_prefix = "sge"
    options_class = SgeOptions
    handle_class = SgeHandle
    options: SgeOptions
    scheduler = "SGE"
    daemon = "SGE qmaster"
    unreachable = QMASTER_DOWN
    unreachable_hint = "is sge_qmaster running? see $SGE_ROOT/$SGE_CELL/common/act_qmaster"
    rejection_hint = ("check backends.sge (queue, pe, project, native) against `qconf -sql`, "
                      "`qconf -spl`")
    job_id_pattern = QSUB_JOB_ID
    daemon_probe = ("qstat", "-g", "c")

    # ------------------------------------------------------------------ checks
    def submitter(self) -> Submitter:
        """The submitter to use: ``auto`` resolved (DRMAA when library and binding exist)."""
        if self.options.submitter is Submitter.AUTO:
            library = drmaa_glue.find_library(self._environ())
            usable = library is not None and drmaa_glue.python_binding_available()
            return Submitter.DRMAA if usable else Submitter.QSUB
        return self.options.submitter

    def submitter_name(self) -> str:
        return self.submitter().value

    def command_env(self) -> Optional[Dict[str, str]]:
        return self._environ()

    def _environ(self) -> Dict[str, str]:
        env = dict(os.environ)
        if not env.get("SGE_ROOT") and Path("/var/lib/gridengine/default/common").is_dir():
            env["SGE_ROOT"] = "/var/lib/gridengine"  # Debian's layout
        return env

    def check_environment(self) -> None:
        env = self._environ()
        if not env.get("SGE_ROOT"):
            raise BackendUnavailable("SGE_ROOT is not set: source your cell's settings "
                                     "(e.g. . $SGE_ROOT/$SGE_CELL/common/settings.sh)")
        if self.submitter() is Submitter.DRMAA:
            if drmaa_glue.find_library(env) is None:
                raise BackendUnavailable(
                    "no DRMAA library found (looked in: "
                    + ", ".join(drmaa_glue.library_candidates(env) or
                                ["$SGE_ROOT/lib/*/libdrmaa.so*",
                                 "/usr/lib/gridengine-drmaa/lib/libdrmaa.so*"])
                    + "); set DRMAA_LIBRARY_PATH, install gridengine-drmaa1.0, or use "
                      "backends.sge.submitter: qsub")
            if not drmaa_glue.python_binding_available():
                raise BackendUnavailable("the drmaa package is missing: "
                                         "pip install 'mxbatch[drmaa]'")
        for tool in ("qsub", "qstat", "qdel"):
            needed = tool != "qsub" or self.submitter() is Submitter.QSUB
            if needed and shutil.which(tool) is None:
                raise BackendUnavailable(f"{tool} is not on PATH: install the SGE client "
                                         "(gridengine-client) or fix PATH")

    # ------------------------------------------------------------------ rendering
    def resource_directives(self, group: RoleGroup) -> List[Directive]:
        task = group.first
        options = self.options
        result = []
        if task.cpus > 1:
            result.append(Directive("-pe", (options.pe, str(task.cpus))))
        if task.memory_mib:
            per_slot = -(-task.memory_mib // task.cpus)
            result.append(Directive("-l", (f"{options.memory_resource}={per_slot}M",)))
        if task.gpus:
            result.append(Directive("-l", (f"{options.gpu_resource}={task.gpus}",)))
        if task.walltime_s:
            result.append(Directive("-l", (f"h_rt={format_duration(task.walltime_s)}",)))
        if options.queue:
            result.append(Directive("-q", (options.queue,)))
        if options.project:
            result.append(Directive("-P", (options.project,)))
        return result

    def common_directives(self, plan: JobPlan) -> List[Directive]:
        env = [Directive("-V")] if plan.run.inherit_env else []
        return env + [Directive("-S", ("/bin/sh",)), Directive("-w", ("e",))]

    def directives(self, plan: JobPlan, group: RoleGroup) -> List[Directive]:
        """Everything, as the qsub job script carries it."""
        return ([Directive("-N", (job_name(plan, group.role),)),
                 Directive("-t", (f"1-{group.count}",)),
                 Directive("-wd", (plan.run.run_dir,)),
                 Directive("-o", (self.output_path(plan, group, "$TASK_ID"),)),
                 Directive("-j", ("y",))]
                + self.common_directives(plan) + self.resource_directives(group)
                + native_directives(self.options.native))

    def native_specification(self, plan: JobPlan, group: RoleGroup) -> List[Directive]:
        return (self.common_directives(plan) + self.resource_directives(group)
                + native_directives(self.options.native))

    # ------------------------------------------------------------------ submitting
    def launch(self, request: BatchRequest, layout: RunLayout,
               rollback: Rollback) -> SgeHandle:
        submitter = Submitter(request.submitter)
        if submitter is Submitter.DRMAA:
            job_ids = self.submit_drmaa(request, rollback)
        else:
            job_ids = {Role(name): job_id for name, job_id
                       in self.submit_scripts(request, layout, rollback).items()}
        return SgeHandle(submitter=submitter, job_ids=job_ids)

    def submit_argv(self, script: Path) -> List[str]:
        return ["qsub", "-terse", str(script)]

    def drmaa_client(self) -> drmaa_glue.DrmaaClient:
        env = self._environ()
        library = drmaa_glue.find_library(env)
        if library is None:
            raise BackendUnavailable("no DRMAA library found; set DRMAA_LIBRARY_PATH")
        return drmaa_glue.DrmaaClient(library, "SGE", {"SGE_ROOT": env["SGE_ROOT"]})

    def drmaa_job_number(self, task_ids: Sequence[str]) -> str:
        """``["12.1", "12.2"]`` -> ``"12"``."""
        return task_ids[0].split(".")[0]

    # ------------------------------------------------------------------ watching
    def native_states(self, handle: SgeHandle, run: RunPlan
                      ) -> Tuple[Dict[TaskKey, NativeState], Dict[TaskKey, str]]:
        result = self.run_command(["qstat", "-xml", "-g", "d", "-u", "*"], timeout=30)
        try:
            queue = parse_qstat_xml(result.stdout)
        except ElementTree.ParseError as exc:
            raise BackendUnavailable(f"cannot parse qstat output: {exc}") from None
        native, ids = {}, {}
        for task in run.tasks:
            number = handle.job_ids.get(task.role)
            key = (task.role, task.rank)
            if number is None:
                native[key] = NativeState.GONE
                continue
            letters = queue.get((number, task.rank + 1))
            native[key] = NativeState.GONE if letters is None else native_state(letters)
            ids[key] = f"{number}.{task.rank + 1}"
        return native, ids

    def delete(self, handle: SgeHandle, force: bool = False) -> None:
        job_ids = list(handle.job_ids.values())
        if handle.submitter is Submitter.DRMAA and not force:
            self.drmaa_client().terminate(job_ids)
        else:
            self.delete_ids(job_ids, force=force)

    def delete_ids(self, job_ids: Sequence[str], force: bool = False) -> None:
        if job_ids:
            self.run_command(["qdel", *(["-f"] if force else []), *job_ids], check=False,
                             timeout=30)
