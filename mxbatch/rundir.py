"""The run directory of a job: created once, never reused.

``<rendezvous.dir>/<job-id>/`` (mode 0700) holds ``plan.json``, ``runtime.pyz``,
``tasks/``, ``logs/`` and ``pyhook/``. ``check_writable`` runs before anything
is created so a bad ``rendezvous.dir`` fails with nothing half-done.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from . import bundle
from .errors import SpecError
from .plan import JobPlan
from .runtime import pyhook
from .runtime.rendezvous import FileRendezvous

SUBDIRS = ("tasks", "logs", "pyhook")


def check_writable(plan: JobPlan) -> None:
    """SpecError (citing ``rendezvous.dir``) unless the run directory can be created."""
    base = plan.run_dir.parent
    try:
        base.mkdir(parents=True, exist_ok=True, mode=0o700)
        probe = tempfile.mkdtemp(prefix=".mxbatch-probe-", dir=base)
        os.rmdir(probe)
    except OSError as exc:
        raise plan.spec.error(("rendezvous", "dir"),
                              f"cannot create run directories in {base}: "
                              f"{exc.strerror or exc}") from None
    if plan.run_dir.exists():
        raise SpecError(f"run directory {plan.run_dir} already exists (job ids are never reused)")


def create(plan: JobPlan) -> Path:
    """Create and fill the run directory of ``plan``; returns it."""
    check_writable(plan)
    run_dir = plan.run_dir
    run_dir.mkdir(mode=0o700)
    for name in SUBDIRS:
        (run_dir / name).mkdir(mode=0o700)
    (run_dir / "plan.json").write_text(plan.run.to_json())
    bundle.write_runtime(run_dir / "runtime.pyz")
    pyhook.install(str(run_dir / "pyhook"))
    return run_dir


def rendezvous(run_dir: Path) -> FileRendezvous:
    return FileRendezvous(str(run_dir))
