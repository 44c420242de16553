"""Whether a role has reached the ps-lite scheduler: an established TCP connection from
one of its processes to the scheduler's address, read from ``/proc`` (Linux).

ps-lite's van (zmq) connects every server and worker to the scheduler as soon as the
role creates its kvstore, and keeps that connection for the job's life. A role that
fails before it ever had one failed at start-up (a typo in the script, a missing
module, a bad path): relaunching the job cannot help, and the restart policy says so.

``connected_to`` reads the TCP table of the first process's network namespace
(``/proc/<pid>/net/tcp``: IPv4 only, as ps-lite's addresses are) and each process's
descriptors (``/proc/<pid>/fd``): a few small reads, made once a second per role and
only until the connection is seen.
"""

import os
import socket
import struct
from typing import Iterable, Set

#: the state column of an established connection in ``/proc/net/tcp``
_ESTABLISHED = "01"


def _hex_address(ip: str, port: int) -> str:
    """``ip:port`` as ``/proc/net/tcp`` writes it (little-endian hex on x86 and arm)."""
    packed = socket.inet_aton(ip)
    return "%08X:%04X" % (struct.unpack("=I", packed)[0], port)


def _inodes_connected(pid: int, remote: str) -> Set[str]:
    """Socket inodes of the established connections to ``remote`` in the netns of ``pid``."""
    found = set()
    try:
        with open("/proc/%d/net/tcp" % pid) as handle:
            next(handle, None)  # the header
            for line in handle:
                fields = line.split()
                if len(fields) > 9 and fields[2] == remote and fields[3] == _ESTABLISHED:
                    found.add(fields[9])
    except OSError:
        pass
    return found


def connected_to(pids: Iterable[int], ip: str, port: int) -> bool:
    """True if one of ``pids`` holds an established TCP connection to ``ip:port``."""
    pids = list(pids)
    if not pids:
        return False
    try:
        remote = _hex_address(ip, port)
    except OSError:
        return False
    inodes = _inodes_connected(pids[0], remote)
    if not inodes:
        return False
    wanted = {"socket:[%s]" % inode for inode in inodes}
    for pid in pids:
        directory = "/proc/%d/fd" % pid
        try:
            entries = os.listdir(directory)
        except OSError:
            continue
        for entry in entries:
            try:
                if os.readlink(os.path.join(directory, entry)) in wanted:
                    return True
            except OSError:
                continue
    return False
