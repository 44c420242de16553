"""Which folders mxbatch may create in, execute from and read back from: OpenSSH's
StrictModes rule, with the sticky exception of a shared scratch folder.

A folder is *trusted* for a user when it, and every folder above it, is owned by that
user or by root and is writable by nobody else (no group or other write bit), except a
folder owned by root with the sticky bit (``/tmp``, mode 1777): anyone may add names
there, but only an entry's owner (or root) may rename or remove it, so a run directory
made there stays the one its maker made. In any other folder another user could rename
a new run directory aside, put one of their own in its place, and the job's agent would
run the ``runtime.pyz`` they wrote there as the submitter.

Both the path as written and the folders its symlinks lead to are checked (a symlink in
a trusted folder cannot be replaced, but what it points through must be trusted too).
Folders that do not exist yet are not checked: mxbatch creates them, mode 0700.

``run_dir_problem`` checks a run directory just made: a real directory (no symlink),
owned by the effective user, mode 0700. Standard library only (``runtime/``).
"""

import dataclasses
import os
import stat
from typing import Iterator, Optional

#: the permission bits through which a user other than the owner may change a folder
_SHARED_WRITE = stat.S_IWGRP | stat.S_IWOTH


@dataclasses.dataclass(frozen=True)
class Untrusted:
    """A folder another user could change: its ``path``, owner ``uid``, ``mode``
    (permission bits, sticky included) and ``why`` (a phrase: "is owned by ...")."""

    path: str
    uid: int
    mode: int
    why: str

    @property
    def owner(self) -> str:
        """The owner's user name (its uid when it has none)."""
        return user_name(self.uid)

    def describe(self) -> str:
        """``/shared/x (owner alice, mode 1777) is owned by another user``."""
        return "%s (owner %s, mode %04o) %s" % (self.path, self.owner, self.mode, self.why)


def user_name(uid: int) -> str:
    """``uid``'s user name, or the number when the system has no name for it."""
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (KeyError, ImportError):
        return str(uid)


def folder_problem(info: os.stat_result, uid: int) -> Optional[str]:
    """Why a folder with ``info`` (its ``stat``) is not to be trusted by ``uid``, or
    None when it is (the rule of this module's docstring)."""
    if info.st_uid not in (uid, 0):
        return "is owned by another user"
    mode = info.st_mode
    if mode & _SHARED_WRITE:
        if mode & stat.S_ISVTX and info.st_uid == 0:
            return None  # a root-owned sticky scratch: only an entry's owner renames it
        if mode & stat.S_ISVTX:
            return "is writable by other users (sticky, but not owned by root)"
        return "is writable by other users, without the sticky bit"
    return None


def _prefixes(path: str) -> Iterator[str]:
    """``/``, ``/a``, ``/a/b`` ... of an absolute, normalized ``path``."""
    yield os.sep
    parts = [p for p in path.split(os.sep) if p]
    for index in range(1, len(parts) + 1):
        yield os.sep + os.sep.join(parts[:index])


def _first_untrusted(path: str, uid: int) -> Optional[Untrusted]:
    for prefix in _prefixes(path):
        try:
            info = os.lstat(prefix)
        except OSError:  # missing: the rest is made by mxbatch (0700); not a folder, a
            return None  # symlink loop: whoever creates in it says so, in its words
        if stat.S_ISLNK(info.st_mode):
            continue  # fixed by its (checked) folder; its target is checked by realpath
        problem = folder_problem(info, uid)
        if problem is not None:
            return Untrusted(prefix, info.st_uid, stat.S_IMODE(info.st_mode), problem)
    return None


def untrusted_folder(path: str, uid: Optional[int] = None) -> Optional[Untrusted]:
    """The first folder, from ``/`` down to ``path`` (as far as it exists), that a user
    other than ``uid`` (default: the effective user) or root could change, along the
    path as written and along its real path; None when every one is trusted."""
    uid = os.geteuid() if uid is None else uid
    written = os.path.normpath(os.path.abspath(path))
    found = _first_untrusted(written, uid)
    if found is None:
        real = os.path.realpath(written)
        if real != written:
            found = _first_untrusted(real, uid)
    return found


def trusted_file(path: str, uid: Optional[int] = None) -> bool:
    """Whether nobody but ``uid`` (default: the effective user) or root could have
    written the file at ``path``: a regular file (no symlink), theirs, writable by
    nobody else, in a trusted folder (``untrusted_folder``). For what mxbatch caches
    and later ships to be run (a packed Python environment)."""
    uid = os.geteuid() if uid is None else uid
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return (stat.S_ISREG(info.st_mode) and info.st_uid == uid
            and not info.st_mode & _SHARED_WRITE
            and untrusted_folder(os.path.dirname(os.path.abspath(path)), uid) is None)


def run_dir_problem(info: os.stat_result, uid: Optional[int] = None) -> Optional[str]:
    """Why a run directory just made, with ``info`` (its ``lstat`` or the ``fstat`` of
    a descriptor opened with ``O_NOFOLLOW``), is not the one mxbatch made: not a
    directory, another owner than ``uid`` (default: the effective user), or a mode
    other than 0700. None when it is."""
    uid = os.geteuid() if uid is None else uid
    if not stat.S_ISDIR(info.st_mode):
        return "is not a directory"
    if info.st_uid != uid:
        return "is owned by %s, not %s" % (user_name(info.st_uid), user_name(uid))
    if stat.S_IMODE(info.st_mode) != 0o700:
        return "has mode %04o, not 0700" % stat.S_IMODE(info.st_mode)
    return None
