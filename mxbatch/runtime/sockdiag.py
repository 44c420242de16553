"""TCP sockets of this process's network namespace, asked of the kernel over netlink
(``NETLINK_SOCK_DIAG``, what ``ss`` uses) instead of read from ``/proc/net/tcp``.

Reading ``/proc/<pid>/net/tcp`` (and ``tcp6``) walks the kernel's whole hash table of
connections, however few sockets there are: about 2 ms a table on the test VM, 4 ms a
look at both, which the scheduler's supervisor paid 20 times a second until its role
listened (8 % of a core, on the host where the roles import MXNet). A sock_diag dump
of listening sockets only walks the listening table: a few dozen microseconds.

``tcp_sockets(states, port=...)`` answers for this process's own network namespace
only (a netlink socket speaks for the namespace it was made in); ``listeners`` uses it
when the role shares that namespace and reads ``/proc`` otherwise (a container with a
network of its own). ``SockDiagUnavailable`` when the kernel refuses (no
``inet_diag`` module, a seccomp filter): callers fall back to ``/proc``.
Standard library only, like the whole runtime.
"""

import ipaddress
import os
import socket
import struct
from typing import Iterator, List, NamedTuple, Optional

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 0x1
NLM_F_DUMP = 0x300
NLMSG_ERROR = 2
NLMSG_DONE = 3
#: the TCP state of a listening socket (``include/net/tcp_states.h``), as a bit of
#: ``idiag_states``
TCP_LISTEN = 10
#: how long one dump may take at most (the kernel answers at once; a bound all the same)
TIMEOUT_S = 2.0

_HEADER = struct.Struct("=IHHII")          # nlmsghdr
_REQUEST = struct.Struct("=BBBxI")          # inet_diag_req_v2 up to its sockid
_PORTS = struct.Struct("!HH")               # sockid: sport, dport (network order)
_TAIL = struct.Struct("=III")               # sockid: interface, cookie[2]
_MESSAGE_HEAD = struct.Struct("=BBBB")      # inet_diag_msg: family, state, timer, retrans
_MESSAGE_TAIL = struct.Struct("=IIIII")     # expires, rqueue, wqueue, uid, inode
_SOCKID_SIZE = _PORTS.size + 32 + _TAIL.size
_NO_COOKIE = 0xFFFFFFFF


class SockDiagUnavailable(OSError):
    """The kernel does not answer sock_diag requests here."""


class TcpSocket(NamedTuple):
    """One TCP socket: its state (``TCP_*``), local and remote address, inode."""

    state: int
    local_ip: str
    local_port: int
    remote_ip: str
    remote_port: int
    inode: int


def _address(family: int, raw: bytes) -> str:
    """The address of a sockid field (an IPv4-mapped IPv6 address as IPv4)."""
    if family == socket.AF_INET:
        return str(ipaddress.IPv4Address(raw[:4]))
    address = ipaddress.IPv6Address(raw)
    return str(address.ipv4_mapped) if address.ipv4_mapped is not None else str(address)


def _request(family: int, states: int, sequence: int) -> bytes:
    body = (_REQUEST.pack(family, socket.IPPROTO_TCP, 0, states) + _PORTS.pack(0, 0)
            + bytes(32) + _TAIL.pack(0, _NO_COOKIE, _NO_COOKIE))
    return _HEADER.pack(_HEADER.size + len(body), SOCK_DIAG_BY_FAMILY,
                        NLM_F_REQUEST | NLM_F_DUMP, sequence, 0) + body


def _parse(data: bytes) -> Iterator[Optional[TcpSocket]]:
    """The sockets of one netlink reply; None marks the dump's end."""
    offset = 0
    while offset + _HEADER.size <= len(data):
        length, kind = _HEADER.unpack_from(data, offset)[:2]
        if length < _HEADER.size:
            raise SockDiagUnavailable("sock_diag: malformed reply")
        if kind == NLMSG_DONE:
            yield None
            return
        if kind == NLMSG_ERROR:
            error = -struct.unpack_from("=i", data, offset + _HEADER.size)[0]
            raise SockDiagUnavailable(error, "sock_diag: %s" % os.strerror(error))
        if kind == SOCK_DIAG_BY_FAMILY:
            at = offset + _HEADER.size
            family, state = _MESSAGE_HEAD.unpack_from(data, at)[:2]
            at += _MESSAGE_HEAD.size
            sport, dport = _PORTS.unpack_from(data, at)
            source = data[at + _PORTS.size:at + _PORTS.size + 16]
            destination = data[at + _PORTS.size + 16:at + _PORTS.size + 32]
            inode = _MESSAGE_TAIL.unpack_from(data, at + _SOCKID_SIZE)[4]
            yield TcpSocket(state, _address(family, source), sport,
                            _address(family, destination), dport, inode)
        offset += (length + 3) & ~3


def tcp_sockets(states: int, port: Optional[int] = None) -> List[TcpSocket]:
    """The TCP sockets (IPv4 and IPv6) of this process's network namespace in one of
    ``states`` (a bit mask: ``1 << TCP_LISTEN``), bound to ``port`` when given.
    ``SockDiagUnavailable`` when the kernel refuses."""
    found: List[TcpSocket] = []
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
    except (OSError, AttributeError) as exc:  # AttributeError: no AF_NETLINK here
        raise SockDiagUnavailable("sock_diag: %s" % exc) from None
    with sock:
        sock.settimeout(TIMEOUT_S)
        try:
            for sequence, family in enumerate((socket.AF_INET, socket.AF_INET6), 1):
                sock.send(_request(family, states, sequence))
                done = False
                while not done:
                    for found_socket in _parse(sock.recv(65536)):
                        if found_socket is None:
                            done = True
                        elif port is None or found_socket.local_port == port:
                            found.append(found_socket)
        except SockDiagUnavailable:
            raise
        except OSError as exc:  # a timeout included
            raise SockDiagUnavailable("sock_diag: %s" % exc) from None
    return found


def same_network(pid: int) -> bool:
    """Whether ``pid`` is in this process's network namespace (False when unknown)."""
    try:
        return os.stat("/proc/%d/ns/net" % pid).st_ino == os.stat("/proc/self/ns/net").st_ino
    except OSError:
        return False
