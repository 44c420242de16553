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
import shlex
import shutil
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple

from ..errors import BackendUnavailable
from ..plan import JobPlan
from ..records import JobRecord
from ..runtime.planfile import RunPlan
from ..status import NativeState, TaskKey
from ..units import format_duration
from . import drmaa as drmaa_glue
from .base import RenderedItem, Submission
from .batch import (
    BatchBackend,
    Directive,
    RoleGroup,
    check_choice,
    flat_argv,
    job_name,
    native_directives,
    parse_task_ranges,
    role_groups,
    runtime_argv,
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
    DRMAA = "drmaa"
    QSUB = "qsub"


@dataclasses.dataclass(frozen=True)
class SgeOptions:
    """``backends.sge``."""

    submitter: str = "auto"
    queue: Optional[str] = None
    pe: str = "smp"
    project: Optional[str] = None
    memory_resource: str = "h_vmem"
    gpu_resource: str = "gpu"
    native: Tuple[str, ...] = ()


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


class SgeBackend(BatchBackend):
    name = "sge"
    script_template = "sge.sh"
    directive_prefix = "#$"
    options_class = SgeOptions
    scheduler = "SGE"
    daemon = "SGE qmaster"
    unreachable = QMASTER_DOWN
    unreachable_hint = "is sge_qmaster running? see $SGE_ROOT/$SGE_CELL/common/act_qmaster"
    rejection_hint = ("check backends.sge (queue, pe, project, native) against `qconf -sql`, "
                      "`qconf -spl`")
    job_id_pattern = QSUB_JOB_ID

    # ------------------------------------------------------------------ checks
    def submitter(self) -> Submitter:
        try:
            wanted = Submitter(self.options.submitter)
        except ValueError:
            wanted = None
        if wanted is Submitter.AUTO:
            library = drmaa_glue.find_library(self._environ())
            usable = library is not None and drmaa_glue.python_binding_available()
            return Submitter.DRMAA if usable else Submitter.QSUB
        return wanted or Submitter.QSUB

    def command_env(self) -> Optional[Dict[str, str]]:
        return self._environ()

    def _environ(self) -> Dict[str, str]:
        env = dict(os.environ)
        if not env.get("SGE_ROOT") and Path("/var/lib/gridengine/default/common").is_dir():
            env["SGE_ROOT"] = "/var/lib/gridengine"  # Debian's layout
        return env

    def check(self, plan: JobPlan) -> None:
        check_choice(plan, self.name, "submitter", self.options.submitter, Submitter)

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
        options: SgeOptions = self.options
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
        output = str(plan.run_dir / "logs" / f"sge-{group.role.value}.$TASK_ID.out")
        return ([Directive("-N", (job_name(plan, group.role),)),
                 Directive("-t", (f"1-{group.count}",)),
                 Directive("-wd", (str(plan.run_dir),)),
                 Directive("-o", (output,)), Directive("-j", ("y",))]
                + self.common_directives(plan) + self.resource_directives(group)
                + native_directives(self.options.native))

    def native_specification(self, plan: JobPlan, group: RoleGroup) -> str:
        """The DRMAA native specification: what the job template has no attribute for."""
        directives = (self.common_directives(plan) + self.resource_directives(group)
                      + native_directives(self.options.native))
        return " ".join(shlex.quote(a) for a in flat_argv(directives))

    def template(self, plan: JobPlan, group: RoleGroup) -> drmaa_glue.TemplateSpec:
        argv = runtime_argv(plan, group.role)
        return drmaa_glue.TemplateSpec(
            remote_command=argv[0], args=argv[1:], job_name=job_name(plan, group.role),
            native=self.native_specification(plan, group),
            output_path=":" + str(plan.run_dir / "logs" /
                                  f"sge-{group.role.value}.$drmaa_incr_ph$.out"),
            working_directory=str(plan.run_dir), count=group.count)

    def render(self, plan: JobPlan) -> Submission:
        submission = super().render(plan)
        if self.submitter() is Submitter.DRMAA:
            items = [RenderedItem(f"DRMAA runBulkJobs for {g.role.value} (1-{g.count})",
                                  "\n".join(f"{k}: {v}" for k, v in
                                            dataclasses.asdict(self.template(plan, g)).items()))
                     for g in role_groups(plan.run)]
            submission = dataclasses.replace(submission, items=items + submission.items)
        return submission

    # ------------------------------------------------------------------ submitting
    def submit_groups(self, submission: Submission, scripts: Mapping[str, Path]
                      ) -> Dict[str, object]:
        plan = submission.plan
        groups = role_groups(plan.run)
        submitter = self.submitter()
        if submitter is Submitter.DRMAA:
            client = self._drmaa_client()
            ids = client.submit([self.template(plan, g) for g in groups])
            job_ids = {g.role.value: _array_job_number(i) for g, i in zip(groups, ids)}
        else:
            job_ids = {}
            try:
                for group in groups:
                    job_ids[group.role.value] = self._qsub(scripts[group.role.value])
            except BaseException:
                self._qdel(list(job_ids.values()), force=True)
                raise
        return {"submitter": submitter.value, "job_ids": job_ids}

    def _drmaa_client(self) -> drmaa_glue.DrmaaClient:
        env = self._environ()
        library = drmaa_glue.find_library(env)
        if library is None:
            raise BackendUnavailable("no DRMAA library found; set DRMAA_LIBRARY_PATH")
        return drmaa_glue.DrmaaClient(library, "SGE", {"SGE_ROOT": env["SGE_ROOT"]})

    def _qsub(self, script: Path) -> str:
        return self.submit_script(["qsub", "-terse", str(script)])

    # ------------------------------------------------------------------ watching
    def native_states(self, record: JobRecord, run: RunPlan
                      ) -> Tuple[Dict[TaskKey, NativeState], Dict[TaskKey, str]]:
        job_ids: Dict[str, str] = record.native.get("job_ids", {})
        result = self.run_command(["qstat", "-xml", "-g", "d", "-u", "*"], timeout=30)
        try:
            queue = parse_qstat_xml(result.stdout)
        except ElementTree.ParseError as exc:
            raise BackendUnavailable(f"cannot parse qstat output: {exc}") from None
        native, ids = {}, {}
        for task in run.tasks:
            number = job_ids.get(task.role)
            key = (task.role, task.rank)
            if number is None:
                native[key] = NativeState.GONE
                continue
            letters = queue.get((number, task.rank + 1))
            native[key] = NativeState.GONE if letters is None else native_state(letters)
            ids[key] = f"{number}.{task.rank + 1}"
        return native, ids

    def delete(self, record: JobRecord, force: bool = False) -> None:
        job_ids = list(record.native.get("job_ids", {}).values())
        if record.native.get("submitter") == Submitter.DRMAA.value and not force:
            self._drmaa_client().terminate(job_ids)
        else:
            self._qdel(job_ids, force=force)

    def _qdel(self, job_ids: List[str], force: bool = False) -> None:
        if job_ids:
            self.run_command(["qdel", *(["-f"] if force else []), *job_ids], check=False,
                             timeout=30)


def _array_job_number(task_ids: List[str]) -> str:
    """``["12.1", "12.2"]`` -> ``"12"``."""
    return task_ids[0].split(".")[0]
