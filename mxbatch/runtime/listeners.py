"""Who listens on a TCP port, asked of the kernel (Linux): the scheduler's readiness.

That something accepts connections on the scheduler's ``ip:port`` says nothing about
whose socket it is: another job's scheduler, or any program, may have bound the port
between the supervisor's free-port probe and the role's own bind. Members that joined
that address would join another job. So readiness is asked of the kernel instead:

- the listening sockets on the port are read from the role's own network namespace
  (the kernel's sock_diag, ``sockdiag``, when that is the supervisor's; else
  ``/proc/<pid>/net/tcp`` and ``tcp6`` of one of its processes: a container's network
  may not be the supervisor's), keeping those a connection to ``ip`` would reach (bound
  to ``ip`` itself, else to the wildcard address, as the kernel picks them);
- such a socket is the role's when it is an open file of one of the role's processes
  (``/proc/<pid>/fd/*`` -> ``socket:[inode]``).

``port_state`` answers ``Holder.ROLE`` (ready), ``Holder.OTHER`` (the port was taken:
``holders`` names the processes, where ``/proc`` lets this user see them) or
``Holder.NOBODY`` (not bound yet). Standard library only, like the whole runtime.

The other direction, ``connected_to`` (``ConnectionTables`` for a round of looks, each
namespace's table read once): whether a server or worker has *reached* the
scheduler, an established connection from one of its processes to the scheduler's
address (ps-lite's van opens it when the role creates its kvstore, and keeps it), from
``/proc`` (a sock_diag dump of established connections walks the same table: no gain). A
role that fails before it ever had one failed at start-up (a typo in the script, a
missing module): relaunching the job cannot help, and the restart policy says so.
"""

import enum
import ipaddress
import os
import sys
from typing import Callable, Dict, Iterable, List, NamedTuple, Optional, Set, Tuple

from . import sockdiag

#: ``st`` of a listening socket in ``/proc/net/tcp``, of an established connection
_LISTEN = "0A"
_ESTABLISHED = "01"


class Holder(enum.Enum):
    NOBODY = "nobody"  # no socket listens there (the role has not bound it yet)
    ROLE = "role"      # one of the role's processes holds the listening socket
    OTHER = "other"    # a socket nobody of the role holds: the port was taken


class Listener(NamedTuple):
    """One listening TCP socket: its local address and its inode."""

    ip: str
    port: int
    inode: int


def _address(hex_ip: str) -> str:
    """The address of ``/proc/net/tcp``'s hex form: 32-bit words in host byte order."""
    raw = bytes.fromhex(hex_ip)
    if sys.byteorder == "little":
        raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    address = ipaddress.ip_address(raw)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def parse_listeners(text: str) -> List[Listener]:
    """The listening sockets of a ``/proc/net/tcp`` or ``tcp6`` table."""
    found = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != _LISTEN:
            continue
        hex_ip, _, hex_port = fields[1].partition(":")
        try:
            found.append(Listener(_address(hex_ip), int(hex_port, 16), int(fields[9])))
        except ValueError:
            continue
    return found


def listeners(netns_pid: int, port: int) -> List[Listener]:
    """The listening sockets on ``port`` in the network namespace of ``netns_pid``: from
    the kernel's sock_diag when that is this process's own namespace (``sockdiag``: no
    walk of the connection table), else, or when sock_diag is refused, from ``/proc``."""
    if sockdiag.same_network(netns_pid):
        try:
            return [Listener(sock.local_ip, sock.local_port, sock.inode)
                    for sock in sockdiag.tcp_sockets(1 << sockdiag.TCP_LISTEN, port=port)]
        except sockdiag.SockDiagUnavailable:
            pass
    found: List[Listener] = []
    for text in _tables(netns_pid):
        found.extend(sock for sock in parse_listeners(text) if sock.port == port)
    return found


def reaching(found: Iterable[Listener], ip: str) -> List[Listener]:
    """Those of ``found`` a connection to ``ip`` reaches: bound to ``ip`` itself if any
    is (the kernel prefers the exact address), else to the wildcard address."""
    found = list(found)
    exact = [sock for sock in found if sock.ip == ip]
    return exact or [sock for sock in found if sock.ip in ("0.0.0.0", "::")]


def socket_inodes(pids: Iterable[int]) -> Set[int]:
    """The inodes of the sockets open in ``pids`` (those ``/proc`` lets us read)."""
    inodes: Set[int] = set()
    for pid in pids:
        fd_dir = "/proc/%d/fd" % pid
        try:
            names = os.listdir(fd_dir)
        except OSError:
            continue
        for name in names:
            try:
                target = os.readlink(os.path.join(fd_dir, name))
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    return inodes


def _tables(netns_pid: int) -> List[str]:
    """The ``tcp`` and ``tcp6`` tables of the network namespace of ``netns_pid``."""
    found = []
    for table in ("tcp", "tcp6"):
        try:
            with open("/proc/%d/net/%s" % (netns_pid, table)) as handle:
                found.append(handle.read())
        except OSError:
            continue  # gone meanwhile, or no IPv6
    return found


def connections_to(netns_pid: int, ip: str, port: int) -> Set[int]:
    """The inodes of the established connections to ``ip:port`` in the network
    namespace of ``netns_pid``."""
    found: Set[int] = set()
    for text in _tables(netns_pid):
        for line in text.splitlines()[1:]:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _ESTABLISHED:
                continue
            hex_ip, _, hex_port = fields[2].partition(":")
            try:
                if int(hex_port, 16) == port and _address(hex_ip) == ip:
                    found.add(int(fields[9]))
            except ValueError:
                continue
    return found


class ConnectionTables:
    """The established connections of each network namespace, read at most once for
    each address asked: one round of looks (an agent's, once a second, for every member
    not yet known to have reached the scheduler). A namespace's table lists every
    connection in it: 1,000 on a host of 250 members, read once per member it cost
    each ssh host's agent 2-3 s of CPU a second until its members had connected."""

    def __init__(self) -> None:
        self._found: Dict[Tuple[Tuple[int, int], str, int], Set[int]] = {}

    def connected_to(self, pids: Iterable[int], ip: str, port: int) -> bool:
        """True if one of ``pids`` (a role's processes, the first for its network
        namespace) holds an established TCP connection to ``ip:port``. Processes that
        hold no socket at all (a role still importing MXNet: its output goes to pipes)
        are answered from their ``/proc/<pid>/fd`` alone: the namespace's table, which
        takes 4 ms a family to read even when nearly empty (the kernel walks its whole
        hash table), is read only for a role with a socket."""
        pids = list(pids)
        if not pids:
            return False
        own = socket_inodes(pids)
        if not own:
            return False
        key = (_netns_of(pids[0]), ip, port)
        inodes = self._found.get(key)
        if inodes is None:
            inodes = self._found[key] = connections_to(pids[0], ip, port)
        return bool(own & inodes)


def _netns_of(pid: int) -> Tuple[int, int]:
    """Which network namespace ``pid`` is in (device and inode of its ``ns/net``);
    ``(-1, pid)``, a namespace of its own, where that cannot be read."""
    try:
        info = os.stat("/proc/%d/ns/net" % pid)
    except OSError:
        return (-1, pid)
    return (info.st_dev, info.st_ino)


def connected_to(pids: Iterable[int], ip: str, port: int) -> bool:
    """``ConnectionTables.connected_to`` for one look: a few small reads, and the
    namespace's whole connection table."""
    return ConnectionTables().connected_to(pids, ip, port)


class PortState(NamedTuple):
    holder: Holder
    #: the listening sockets a connection would reach (for OTHER: the foreign ones)
    sockets: Tuple[Listener, ...] = ()


def port_state(ip: str, port: int, role_pids: Callable[[], Iterable[int]],
               netns_pid: int) -> PortState:
    """Who holds ``ip:port`` in the network namespace of ``netns_pid``: the role (whose
    processes ``role_pids()`` gives, asked only once something listens), another
    process, or nobody yet."""
    found = reaching(listeners(netns_pid, port), ip)
    if not found:
        return PortState(Holder.NOBODY)
    ours = socket_inodes(role_pids())
    foreign = tuple(sock for sock in found if sock.inode not in ours)
    if foreign:
        return PortState(Holder.OTHER, foreign)
    return PortState(Holder.ROLE, tuple(found))


def holders(sockets: Iterable[Listener]) -> List[Tuple[int, str]]:
    """(pid, command line) of the processes that have one of ``sockets`` open, as far
    as ``/proc`` shows them to this user (a whole scan: for error messages only)."""
    wanted = {sock.inode for sock in sockets}
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or not socket_inodes([int(entry)]) & wanted:
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as handle:
                argv = handle.read().rstrip(b"\0").split(b"\0")
        except OSError:
            argv = []
        found.append((int(entry), " ".join(os.fsdecode(a) for a in argv)[:120]))
    return found


def describe_holders(sockets: Iterable[Listener]) -> Optional[str]:
    """``pid 123 (python3 serve.py)``, for the processes holding ``sockets``; None
    when none can be seen (another user's, another namespace's)."""
    seen = holders(sockets)
    if not seen:
        return None
    return ", ".join("pid %d (%s)" % (pid, command) if command else "pid %d" % pid
                     for pid, command in seen)
