"""SGE gang start (``backends.sge.gang: true``): the whole job as one parallel job.

One ``qsub -pe <gang_pe> N`` (N = the job's tasks, one slot each) whose script runs the
gang master (``hosts.gang``): once SGE grants all N slots, the master starts every task
through ``qrsh -inherit`` to the hosts of its ``PE_HOSTFILE``, so all tasks start
together or none does. With the arrays, the scheduler's array may run (and hold its
slots) for hours while the workers' array waits; a gang job waits as one job, nothing
started, until the slots are free, and the startup deadline fails it naming it. The
PE needs ``control_slaves TRUE`` and ``job_is_first_task FALSE`` (every slot is for a
task), with ``allocation_rule $round_robin`` or ``$fill_up`` to span hosts.

Each task gets one slot: roles asking for more cpus, or for GPUs, need the arrays
(``gang: false``). qsub only (DRMAA's bulk jobs are arrays). Status: the task records
the master writes into the run directory, and ``qstat`` of the one job for every task;
cancel: the abort record (the master stops the agents), then ``qdel``.
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Sequence, Tuple

from ...quoting import shell_words
from ...runtime.layout import RunLayout
from ...runtime.planfile import RunPlan
from ...spec.plan import JobPlan
from ...spec.units import format_duration
from ..base import Rollback
from ..status import NativeState
from .common import BatchRequest, NativeView
from .jobscript import (
    Directive,
    directive_lines,
    job_id_export,
    native_directives,
    relative_to_run_dir,
    render_jobscript,
)
from .queueview import USUAL, ViewScope
from .sge import SgeBackend, SgeHandle, Submitter, in_error_state, native_state

#: the one job script's name (``jobs/gang.sh``, ``logs/sge-gang.out``)
GANG = "gang"
#: the gang master, run by the job script with the submitter's Python
MASTER_MODULE = "mxbatch.backends.hosts.gang"


class SgeGangBackend(SgeBackend):
    """See the module docstring."""

    name = "sge-gang"

    def submitter(self) -> Submitter:
        return Submitter.QSUB

    def variant(self, environ: Mapping[str, str]) -> "SgeGangBackend":
        return self

    # ------------------------------------------------------------------ checks
    def check(self, plan: JobPlan) -> None:
        if plan.run.restarts.enabled:
            raise plan.spec.error(("restarts", "max"), "a gang job (backends.sge.gang) is not "
                                  "relaunched yet", "use gang: false (the arrays), or "
                                  "restarts.max: 0 (see docs/long-jobs.md)")
        for task in plan.run.tasks:
            if task.cpus > 1 or task.gpus:
                raise plan.spec.error(
                    ("backends", "sge", "gang"),
                    f"a gang job gives each task one slot, and {task.label} asks for "
                    f"{task.cpus} cpus and {task.gpus} gpus", "use gang: false (the arrays)")
        super().check(plan)

    def check_directives(self, plan: JobPlan) -> List[List[Directive]]:
        return [self.gang_directives(plan)]

    # ------------------------------------------------------------------ rendering
    def gang_directives(self, plan: JobPlan) -> List[Directive]:
        sge = ("backends", "sge")
        output = relative_to_run_dir(plan, plan.run.layout.batch_output_single(
            self.output_prefix, GANG))
        result = [Directive("-N", (plan.job_id,)), Directive("-o", (output,)),
                  Directive("-j", ("y",)), *self.common_directives(plan),
                  Directive("-pe", (self.options.gang_pe, str(len(plan.run.tasks))),
                            source=(*sge, "gang_pe"))]
        walltime = max((t.walltime_s or 0 for t in plan.run.tasks), default=0)
        if walltime:
            result.append(Directive("-l", (f"h_rt={format_duration(walltime)}",)))
        if self.options.queue:
            result.append(Directive("-q", (self.options.queue,), source=(*sge, "queue")))
        if self.options.project:
            result.append(Directive("-P", (self.options.project,), source=(*sge, "project")))
        return result + native_directives(self.options.native, (*sge, "native"))

    def scripts(self, plan: JobPlan) -> Dict[str, str]:
        return {GANG: render_jobscript(
            "sge-gang.sh", job_id=plan.job_id, count=str(len(plan.run.tasks)),
            pe=self.options.gang_pe,
            directives=directive_lines(self.directive_prefix, self.gang_directives(plan),
                                       self.script_token),
            export=job_id_export(plan),
            command=shell_words([plan.run.python, "-m", MASTER_MODULE, plan.run.run_dir]))}

    def templates(self, plan: JobPlan) -> Tuple:
        return ()

    # ------------------------------------------------------------------ submitting
    def launch(self, request: BatchRequest, layout: RunLayout,
               rollback: Rollback) -> SgeHandle:
        number = self.submit_scripts(request, rollback)[GANG]
        return SgeHandle(submitter=Submitter.QSUB,
                         job_ids={t.role: number for t in request.plan.run.tasks})

    # ------------------------------------------------------------------ watching
    def native_view(self, handle: SgeHandle, run: RunPlan,
                    scope: ViewScope = USUAL) -> NativeView:
        """Every task is in the one job's state (queued until SGE grants every slot)."""
        number = next(iter(handle.job_ids.values()), "")
        queue, unknown = self.read_queue([number], scope)
        letters = queue.get((number, 1))
        state = (NativeState.QUEUED if number in unknown
                 else NativeState.GONE if letters is None else native_state(letters))
        view = NativeView(states={}, ids={})
        held = ""
        if letters is not None and in_error_state(letters):
            held = (f"{letters}: {self.error_reasons(number).get(1) or 'no reason given'} "
                    f"(qstat -j {number})")
        for task in run.tasks:
            key = (task.role, task.rank)
            view.states[key] = state
            view.ids[key] = f"{number} (gang, {len(run.tasks)} slots in PE " \
                            f"{self.options.gang_pe})"
            if held:
                view.held[key] = held
        return view

    def delete(self, handle: SgeHandle, force: bool = False) -> None:
        self.delete_ids(sorted(set(handle.job_ids.values())), force=force)

    def delete_ids(self, job_ids: Sequence[str], force: bool = False) -> None:
        super().delete_ids(sorted(set(job_ids)), force=force)
