"""Keep a job's run directory up to date with its live rendezvous, for tests that read
task records from the run directory while the job runs.

    python tests/mirror.py JOB_ID [SECONDS]

Every 0.3 s, for at most SECONDS (default 600), it reads the scheduler record and
every task record through the backend's own ``rendezvous`` (for YARN: the
application's key-value store, mirrored into the run directory as ``mxbatch status``
does), until it is killed. MXBATCH_HOME and the backend's environment come from the
caller. A backend whose rendezvous is the run directory itself needs no mirror.
"""

from __future__ import annotations

import sys
import time

from mxbatch.backends import records
from mxbatch.backends.base import load_run_plan
from mxbatch.jobs import submit as jobs

INTERVAL_S = 0.3


def mirror(job_id: str, seconds: float) -> None:
    record = records.load(job_id)
    rendezvous = jobs.backend_for_record(record).rendezvous(record)
    keys = load_run_plan(record).task_keys()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            rendezvous.read_scheduler()
            rendezvous.read_tasks(keys)
        except Exception as exc:  # a busy application master: keep mirroring
            sys.stderr.write(f"mirror: {type(exc).__name__}: {exc}\n")
        time.sleep(INTERVAL_S)


if __name__ == "__main__":
    mirror(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 600.0)
