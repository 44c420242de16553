"""The run directory of a job: created once, never reused (layout: ``RunLayout``).

``check_trusted`` (no other user can change the rendezvous folder or one above it:
``runtime.trust``) and ``check_writable`` run before anything is created so a bad
``rendezvous.dir`` fails with nothing half-done; ``create`` makes the directory (mode
0700, checked through a descriptor once made, and again once filled) with
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
from ..runtime import pyhook, trust
from ..runtime.layout import RunLayout
from ..runtime.rendezvous import FileRendezvous, atomic_write_json
from ..spec.paths import make_private_dirs
from ..spec.plan import JobPlan
from . import bundle

#: what to do about a rendezvous folder that other users can write
TRUST_FIX = ("use a folder of your own (mkdir -m 700 DIR), or a root-owned scratch folder "
             "with the sticky bit (mode 1777, as /tmp); a site whose shared storage only "
             "trusted users can write says so with rendezvous.trust_shared: true in the "
             "site config (docs/shared-systems.md)")


def check_trusted(plan: JobPlan) -> None:
    """SpecError (citing ``rendezvous.dir``) when the rendezvous folder, or a folder
    above it, is one another user could change (``runtime.trust``), unless the site
    config says its shared storage is trusted (``rendezvous.trust_shared``). Creates
    nothing."""
    if plan.spec.rendezvous.trust_shared:
        return
    found = trust.untrusted_folder(str(plan.run_dir.parent))
    if found is not None:
        raise plan.spec.error(("rendezvous", "dir"),
                              f"{found.describe()}: another user could replace a run "
                              "directory there and run code as you", TRUST_FIX)


def check_writable(plan: JobPlan) -> None:
    """SpecError (citing ``rendezvous.dir``) unless the run directory can be created in
    a trusted folder (``check_trusted``, before and after the folders are made)."""
    check_trusted(plan)
    base = plan.run_dir.parent
    try:
        make_private_dirs(base)
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
    check_trusted(plan)  # a folder another user made in the meantime
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
    made = _made_by_us(plan, layout.root, remove)
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
        if not os.path.samestat(made, os.lstat(layout.root)):
            raise plan.spec.error(("rendezvous", "dir"),
                                  f"the run directory {layout.root} was replaced while "
                                  "it was filled: another user can change its folder",
                                  TRUST_FIX)
    except OSError as exc:
        remove()
        raise plan.spec.error(("rendezvous", "dir"),
                              f"cannot create the run directory {layout.root}: "
                              f"{exc.strerror or exc}") from None
    if push_undo is not None:
        push_undo(f"the run directory {layout.root}", remove)
    return layout


def _made_by_us(plan: JobPlan, root: str, remove: Callable[[], None]) -> os.stat_result:
    """The ``stat`` of the run directory just made at ``root``, checked through a
    descriptor that follows no symlink: a directory of this user's, mode 0700
    (``trust.run_dir_problem``); else it is removed (only if it is ours) and this is a
    ``SpecError`` at ``rendezvous.dir``."""
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            info = os.fstat(fd)
        finally:
            os.close(fd)
        problem = trust.run_dir_problem(info)
    except OSError as exc:
        problem = f"cannot be opened as a directory ({exc.strerror or exc})"
        info = None
    if problem is None and info is not None:
        return info
    if info is not None and info.st_uid == os.geteuid():
        remove()
    raise plan.spec.error(("rendezvous", "dir"),
                          f"the run directory {root} just made {problem}: another user "
                          "can change its folder", TRUST_FIX)

