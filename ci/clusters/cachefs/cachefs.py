#!/usr/bin/env python3
"""cachefs.py - one caching NFS *client* of a shared directory, as a FUSE filesystem.

Usage: cachefs.py [--timeout SECS] [--name NAME] EXPORT MOUNTPOINT   (runs in the foreground)

EXPORT plays the NFS server; each mount of it is one client with caches of its own, in this
process. Every change goes straight through to EXPORT, but what a client sees of changes
made elsewhere (by another client, or in EXPORT itself) follows a Linux NFS client:

  lookups     a name found missing stays missing, to stat() and to open() alike, for
              TIMEOUT s after that lookup (negative dentry caching);
  attributes  stat() serves the attributes (size, mtime, inode, mode) of a name's first
              lookup for TIMEOUT s (attribute cache);
  listings    readdir() serves a directory's first listing for TIMEOUT s (readdir cache);
  open        close-to-open consistency: open() of a name not cached as missing fetches
              its attributes anew, and the kernel drops its page cache of the file on every
              open, so the open reads the current file at its current size, and later stat()
              calls see the new attributes too (a file replaced by rename included);
  own changes create, write, truncate, rename, unlink, mkdir... drop this client's entries
              for the names involved and for their directories (and those directories'
              listings): a client sees its own changes at once.

Each cached item lives exactly TIMEOUT s, whatever other clients do: the worst case of
an NFS client, which sometimes notices a change earlier (when another reply brings newer
directory attributes). The kernel caches nothing but file pages between open and close
(entry/attr/negative timeouts 0, no kernel_cache): the caches are this process's. Not
modelled: cluster-wide locks (fcntl/flock locks are per client, as with NFS's
local_lock=all), delayed write-back (writes reach EXPORT at each write(); NFS sends them
at close or fsync at the latest), ESTALE (a file removed elsewhere stays readable through
a descriptor open here), silly rename (hard_remove: a file unlinked here while open is gone
from EXPORT at once). renameat2() flags are refused (EINVAL), as by NFS.
"""

import argparse
import contextlib
import errno
import logging
import os
import stat
import threading
import time

import mfusepy as fuse

UTIME_NOW = (1 << 30) - 1
UTIME_OMIT = (1 << 30) - 2
STAT_FIELDS = ("st_mode", "st_ino", "st_dev", "st_nlink", "st_uid", "st_gid", "st_size",
               "st_blocks", "st_rdev")


def _attrs(st):
    out = {k: getattr(st, k) for k in STAT_FIELDS}
    # nanoseconds (use_ns below)
    out.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
    return out


def _type(entry):
    """The S_IFMT bits of a directory entry, from its d_type (0: unknown)."""
    if entry.is_symlink():
        return stat.S_IFLNK
    if entry.is_dir(follow_symlinks=False):
        return stat.S_IFDIR
    return stat.S_IFREG if entry.is_file(follow_symlinks=False) else 0


def _parent(path):
    return os.path.dirname(path) or "/"


class CacheFS(fuse.Operations):
    use_ns = True  # times are integer nanoseconds

    def __init__(self, export, timeout):
        self._root = os.path.realpath(export)
        self._timeout = timeout
        self._mutex = threading.Lock()
        self._entries = {}   # path -> (expiry, attrs, or None for "missing")
        self._listings = {}  # directory path -> (expiry, names)

    def _real(self, path):
        return self._root + path if path != "/" else self._root

    # --- the caches --------------------------------------------------------------------

    def _fetch(self, path):
        """Look path up in EXPORT now; cache and return its attributes (None: missing)."""
        try:
            attrs = _attrs(os.lstat(self._real(path)))
        except FileNotFoundError:
            attrs = None
        now = time.monotonic()
        with self._mutex:
            if len(self._entries) > 10000:  # now and then, drop what has expired
                self._entries = {k: v for k, v in self._entries.items() if v[0] > now}
            self._entries[path] = (now + self._timeout, attrs)
        return attrs

    def _lookup(self, path):
        with self._mutex:
            hit = self._entries.get(path)
        fresh = hit is not None and hit[0] > time.monotonic()
        attrs = hit[1] if fresh else self._fetch(path)
        if attrs is None:
            raise fuse.FuseOSError(errno.ENOENT)
        return attrs

    def _written(self, path):
        """This client changed a file's contents or attributes: forget its attributes."""
        with self._mutex:
            self._entries.pop(path, None)

    def _changed(self, *paths):
        """This client changed these names: forget them, their directories' attributes and
        listings, and (for a renamed or removed directory) everything below them."""
        with self._mutex:
            for path in paths:
                for key in (path, _parent(path)):
                    self._entries.pop(key, None)
                    self._listings.pop(key, None)
                below = path.rstrip("/") + "/"
                for table in (self._entries, self._listings):
                    for key in [k for k in table if k.startswith(below)]:
                        del table[key]

    @contextlib.contextmanager
    def _changing(self, *paths):
        """Around a change of names by this client: afterwards, failed or not (EEXIST,
        ENOTEMPTY... tell this client the truth about a name), forget what it cached."""
        try:
            yield
        finally:
            self._changed(*paths)

    def _own(self, path):
        """Give a new file the caller's owner (the daemon runs as root)."""
        uid, gid, _ = fuse.fuse_get_context()
        if (uid, gid) != (os.geteuid(), os.getegid()):
            os.lchown(self._real(path), uid, gid)

    # --- metadata ----------------------------------------------------------------------

    def getattr(self, path, fh=None):
        return self._lookup(path)

    def readlink(self, path):
        return os.readlink(self._real(path))

    def opendir(self, path):
        return 0

    def readdir(self, path, fh):
        with self._mutex:
            hit = self._listings.get(path)
        if hit is not None and hit[0] > time.monotonic():
            entries = hit[1]
        else:
            # (name, inode, type): glibc's readdir() skips entries whose inode is 0
            with os.scandir(self._real(path)) as it:
                entries = [(e.name, e.inode(), _type(e)) for e in it]
            with self._mutex:
                self._listings[path] = (time.monotonic() + self._timeout, entries)
        ino = self._lookup(path)["st_ino"]
        return [(".", {"st_ino": ino, "st_mode": stat.S_IFDIR}, 0),
                ("..", {"st_ino": ino, "st_mode": stat.S_IFDIR}, 0),
                *((name, {"st_ino": i, "st_mode": mode}, 0) for name, i, mode in entries)]

    def statfs(self, path):
        sv = os.statvfs(self._real(path))
        return {k: getattr(sv, k) for k in ("f_bsize", "f_frsize", "f_blocks", "f_bfree",
                                             "f_bavail", "f_files", "f_ffree", "f_favail",
                                             "f_flag", "f_namemax")}

    def chmod(self, path, mode):
        os.chmod(self._real(path), mode)
        self._written(path)
        return 0

    def chown(self, path, uid, gid):
        os.lchown(self._real(path), uid, gid)
        self._written(path)
        return 0

    def utimens(self, path, times=None):
        real = self._real(path)
        if times is not None:
            now, old = time.time_ns(), os.lstat(real)
            times = tuple(now if t % 10**9 == UTIME_NOW else o if t % 10**9 == UTIME_OMIT else t
                          for t, o in zip(times, (old.st_atime_ns, old.st_mtime_ns)))
        os.utime(real, ns=times, follow_symlinks=False)
        self._written(path)
        return 0

    # --- names -------------------------------------------------------------------------

    def mkdir(self, path, mode):
        with self._changing(path):
            os.mkdir(self._real(path), mode)
            self._own(path)
        return 0

    def rmdir(self, path):
        with self._changing(path):
            os.rmdir(self._real(path))
        return 0

    def unlink(self, path):
        with self._changing(path):
            os.unlink(self._real(path))
        return 0

    def symlink(self, target, source):  # ln -s source target
        with self._changing(target):
            os.symlink(source, self._real(target))
            self._own(target)
        return 0

    def link(self, target, source):  # ln source target
        with self._changing(target, source):
            os.link(self._real(source), self._real(target))
        return 0

    def rename(self, old, new):
        with self._changing(old, new):
            os.rename(self._real(old), self._real(new))
        return 0

    # --- file contents -----------------------------------------------------------------

    def open(self, path, flags):
        # close-to-open: revalidate the name and its attributes on every open
        if self._fetch(path) is None:
            raise fuse.FuseOSError(errno.ENOENT)
        fd = os.open(self._real(path), flags)
        if flags & os.O_TRUNC:
            self._written(path)
        return fd

    def create(self, path, mode, flags):
        with self._changing(path):
            fd = os.open(self._real(path), flags | os.O_CREAT, mode)
            self._own(path)
        return fd

    def read(self, path, size, offset, fh):
        return os.pread(fh, size, offset)

    def write(self, path, data, offset, fh):
        n = os.pwrite(fh, data, offset)
        self._written(path)
        return n

    def truncate(self, path, length, fh=None):
        if fh is None:
            os.truncate(self._real(path), length)
        else:
            os.ftruncate(fh, length)
        self._written(path)
        return 0

    def fsync(self, path, datasync, fh):
        (os.fdatasync if datasync else os.fsync)(fh)
        return 0

    def release(self, path, fh):
        os.close(fh)
        return 0


class _FUSE(fuse.FUSE):
    def rename_fuse_3(self, old, new, flags):
        # renameat2() flags (RENAME_NOREPLACE...): mfusepy drops them; NFS refuses them
        if flags:
            return -errno.EINVAL
        return super().rename_fuse_3(old, new, flags)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timeout", type=float, default=30.0,
                        help="seconds each cached lookup, attribute set and listing lives")
    parser.add_argument("--name", default="cachefs", help="fsname shown in mountinfo")
    parser.add_argument("export")
    parser.add_argument("mountpoint")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING,
                        format=f"%(asctime)s {args.name} %(levelname)s %(message)s")
    if not os.path.isdir(args.export):
        parser.error(f"not a directory: {args.export}")
    try:
        _FUSE(CacheFS(args.export, args.timeout), args.mountpoint, foreground=True,
              fsname=args.name, subtype="cachefs", allow_other=True, default_permissions=True,
              # the kernel caches nothing: this process does
              entry_timeout=0, attr_timeout=0, negative_timeout=0,
              use_ino=True, hard_remove=True)
    except RuntimeError as e:  # fuse_main()'s result: 8 after SIGTERM/SIGINT/SIGHUP
        if str(e) != "8":
            raise
        logging.warning("stopped by a signal")


if __name__ == "__main__":
    main()
