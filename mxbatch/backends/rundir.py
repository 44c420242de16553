"""The run directory of a job: created once, never reused (layout: ``RunLayout``).

``check_writable`` runs before anything is created so a bad ``rendezvous.dir``
fails with nothing half-done; ``create`` makes the directory (mode 0700) with
``plan.json``, ``runtime.pyz`` (unless the submitting process supervises the job
itself), the exception hook, ``logs/``, and every record
file the tasks will look for (attempt 0's; the attempt loop prepares a later one's),
``attempts.json`` and ``cancel.json`` (``FileRendezvous.prepare``: a task never looks for a
file that does not exist yet, which an NFS client would cache as missing).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Callable, Optional

from ..errors import SpecError
from ..runtime import pyhook
from ..runtime.layout import RunLayout
from ..runtime.rendezvous import FileRendezvous, atomic_write_json
from ..spec.plan import JobPlan
from . import bundle


def check_writable(plan: JobPlan) -> None:
    """SpecError (citing ``rendezvous.dir``) unless the run directory can be created."""
    base = plan.run_dir.parent
    try:
        base.mkdir(parents=True, exist_ok=True, mode=0o700)
        probe = base / f".mxbatch-probe-{os.getpid()}-{os.urandom(4).hex()}"
        try:
            probe.mkdir(mode=0o700)
        finally:  # a Ctrl-C just after the mkdir too: no probe is left among the runs
            if probe.is_dir():
                probe.rmdir()
    except OSError as exc:
        raise plan.spec.error(("rendezvous", "dir"),
                              f"cannot create run directories in {base}: "
                              f"{exc.strerror or exc}") from None
    if plan.run_dir.exists():
        raise SpecError(f"run directory {plan.run_dir} already exists (job ids are never reused)")


#: registers an undo step: ``push(what, undo)`` (``base.Rollback.push``)
PushUndo = Callable[[str, Callable[[], None]], None]


def remove_tree(root: str) -> None:
    """Remove ``root`` and all it holds, errors ignored. ``shutil`` is imported here, by
    the undo that needs it: with the ``bz2`` and ``lzma`` it imports, 3 ms a job's start
    would otherwise pay."""
    import shutil

    shutil.rmtree(root, ignore_errors=True)


def create(plan: JobPlan, push_undo: Optional[PushUndo] = None,
           runtime: bool = True) -> RunLayout:
    """Create and fill the run directory of ``plan``; returns its layout. ``runtime``:
    write ``runtime.pyz`` (not for a job whose only supervisor is the submitting
    process itself, an attached local job: nothing would run it). Once the
    directory exists, its removal is pushed as an undo step (``push_undo``: the
    submission's ``Rollback.push``), so a later failure
    of the submission leaves nothing; a failure while filling it (a full or read-only
    file system) removes what was made and is a ``SpecError`` at ``rendezvous.dir``."""
    check_writable(plan)
    layout = plan.run.layout
    os.mkdir(layout.root, mode=0o700)
    remove = functools.partial(remove_tree, layout.root)
    try:
        for name in RunLayout.SUBDIRS:
            os.mkdir(os.path.join(layout.root, name), mode=0o700)
        Path(layout.plan).write_text(plan.run.to_json())
        if runtime:
            bundle.write_runtime(Path(layout.runtime))
        pyhook.install(layout.pyhook_dir)
        FileRendezvous(layout.root).prepare(plan.run)
        for path in (layout.attempts_record, layout.cancel):
            atomic_write_json(path, {})  # unwritten: read by name, never looked up missing
    except OSError as exc:
        remove()
        raise plan.spec.error(("rendezvous", "dir"),
                              f"cannot create the run directory {layout.root}: "
                              f"{exc.strerror or exc}") from None
    if push_undo is not None:
        push_undo(f"the run directory {layout.root}", remove)
    return layout
