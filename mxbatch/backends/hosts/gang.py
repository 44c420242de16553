"""The master of an SGE gang job (``backends.sge.gang``): ``python -m
mxbatch.backends.hosts.gang RUN_DIR``, the job script's one command.

It runs on the master host of the parallel job, once SGE has granted every slot: the
tasks are placed by ``PE_HOSTFILE`` (one a slot), each host's agent is started with
``qrsh -inherit`` and the job is supervised by the ssh controller, its state in the
run directory (on storage the submit host sees, as for every SGE job). A host whose
agent cannot start aborts the job with the reason (nothing else is started); the exit
status is 0 only when every task succeeded.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import List, Optional

from ...errors import MxbatchError
from ...runtime.layout import RunLayout
from ...runtime.planfile import RunPlan
from ...runtime.rendezvous import FileRendezvous
from ...runtime.states import AbortKind, AbortRecord, TaskState
from . import placement
from .allocation import host_setup
from .sshcontrol import SshController
from .starters import StarterKind, qrsh_argv

#: the master's name in the records it writes
BY = "mxbatch gang master"


def main(argv: Optional[List[str]] = None) -> int:
    run_dir = (argv if argv is not None else sys.argv[1:])[0]
    plan = RunPlan.from_json(Path(RunLayout(run_dir).plan).read_text())
    controller: Optional[SshController] = None
    try:
        found = placement.pe_hostfile(os.environ.get(placement.PE_HOSTFILE, ""))
        setup = host_setup(plan, found, StarterKind.QRSH,
                           lambda host, _gpus: qrsh_argv("qrsh", host))
        controller = SshController(plan, setup)
        controller.take_signals()
        controller.prepare()
    except (MxbatchError, ValueError) as exc:
        if controller is not None:
            controller.abandon()
            controller.release_signals()
        message = exc.format_message() if isinstance(exc, MxbatchError) else str(exc)
        sys.stderr.write(f"mxbatch: {message}\n")
        FileRendezvous(run_dir).write_abort(AbortRecord(
            kind=AbortKind.FAILED, by=BY,
            reason=f"the gang job could not start its tasks: {message}"))
        return 1
    controller.run()
    records = controller.rdv.read_tasks(plan.task_keys())
    return 0 if all(r.state is TaskState.SUCCEEDED for r in records.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
