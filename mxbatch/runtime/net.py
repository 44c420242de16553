"""Which IP a task advertises, and which port the scheduler listens on.

ps-lite needs literal IPs (a hostname gives "bind failed"), so:
- an explicit interface wins (its IPv4 address, via SIOCGIFADDR);
- a loopback-only job (every task on this machine) uses 127.0.0.1;
- the scheduler otherwise uses the address of its default-route interface;
- servers and workers use their source address on the route to the scheduler.
"""

import fcntl
import math
import random
import socket
import struct
import zlib
from typing import Iterator, List, Optional

_SIOCGIFADDR = 0x8915


class NetworkError(RuntimeError):
    pass


def interface_names() -> List[str]:
    return [name for _, name in socket.if_nameindex()]


def interface_ip(name: str) -> str:
    """The IPv4 address of interface ``name``; NetworkError if it has none."""
    if name not in interface_names():
        raise NetworkError("no network interface %r here (have: %s)"
                           % (name, ", ".join(interface_names())))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            packed = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR,
                                 struct.pack("256s", name.encode()[:15]))
        except OSError as exc:
            raise NetworkError("interface %r has no IPv4 address: %s" % (name, exc)) from None
    return socket.inet_ntoa(packed[20:24])


def default_route_interface() -> Optional[str]:
    """The interface of the IPv4 default route, from /proc/net/route (Linux)."""
    try:
        with open("/proc/net/route") as handle:
            lines = handle.read().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) > 2 and fields[1] == "00000000":
            return fields[0]
    return None


def source_ip_towards(destination: str) -> str:
    """This host's source IP for packets to ``destination`` (UDP connect: sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect((destination, 9))
        return sock.getsockname()[0]


def scheduler_ip(interface: Optional[str], loopback_only: bool) -> str:
    """The address the scheduler advertises (see the module docstring for the order)."""
    if interface:
        return interface_ip(interface)
    if loopback_only:
        return "127.0.0.1"
    route_if = default_route_interface()
    if route_if:
        try:
            return interface_ip(route_if)
        except NetworkError:
            pass
    try:
        address = socket.gethostbyname(socket.gethostname())
        if not address.startswith("127."):
            return address
    except OSError:
        pass
    return "127.0.0.1"


def node_ip(interface: Optional[str], scheduler_address: str) -> str:
    """The address a server or worker advertises as ``DMLC_NODE_HOST``."""
    if interface:
        return interface_ip(interface)
    return source_ip_towards(scheduler_address)


def port_is_free(ip: str, port: int) -> bool:
    """Whether ``ip:port`` can be bound, as ps-lite binds it (``SO_REUSEADDR``, which zmq
    sets): a port left in ``TIME_WAIT`` by an earlier job is free, one something
    listens on is not. Only a hint: another process may bind it right after."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((ip, port))
        except OSError:
            return False
    return True


def candidate_ports(low: int, high: int, bind_ip: str = "") -> Iterator[int]:
    """Free-looking ports of ``low..high``, each once, in random order (another job may
    share the range; whether the role really got its port is ``listeners``' to say):
    from a random port on, by a random step prime to the range's size, so that no list
    of the range is built and shuffled (a thousand random draws for the default)."""
    size = high - low + 1
    if size < 1:
        return
    start = random.randrange(size)
    step = random.randrange(1, size) if size > 1 else 1
    while math.gcd(step, size) != 1:
        step -= 1
    for index in range(size):
        port = low + (start + index * step) % size
        if port_is_free(bind_ip, port):
            yield port


def member_port(low: int, high: int, index: int, tasks: int, bind_ip: str,
                avoid: int = 0, job_id: str = "") -> Optional[int]:
    """The port for task ``index`` (of ``tasks``) to bind as a server or worker: a free
    one of its own window of ``low..high`` (the range split evenly, in task order), so
    that members on one host listen on ports that grow with their task index: ps-lite
    ranks the nodes of one host by port, and ``kv.rank`` then equals mxbatch's rank.
    The look starts at an offset into the window that ``job_id`` decides (the same for
    every member of a job, stable across its attempts) and wraps around: two jobs of the
    same shape on one host would otherwise probe the same first ports at the same time,
    and the one whose bind came second would leave ps-lite to pick a random port, out of
    rank order. None when its window is empty or taken (ps-lite picks a port itself
    then); ``avoid``: the scheduler's port."""
    width = (high - low + 1) // max(1, tasks)
    if width < 1:
        return None
    start = low + index * width
    width = min(width, high + 1 - start)
    offset = zlib.crc32(job_id.encode("utf-8", "surrogateescape")) % width if job_id else 0
    for step in range(width):
        port = start + (offset + step) % width
        if port != avoid and port_is_free(bind_ip, port):
            return port
    return None
    start = low + index * width
    for port in range(start, min(start + width, high + 1)):
        if port != avoid and port_is_free(bind_ip, port):
            return port
    return None

