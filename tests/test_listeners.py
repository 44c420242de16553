"""Who listens on a port (``runtime.listeners``) and which ports look free
(``runtime.net``), on real sockets of this machine: the scheduler's readiness must be
its own socket, never whatever else accepts on its address."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mxbatch.runtime import listeners, net, procstat, sockdiag
from mxbatch.runtime.listeners import Holder

from .conftest import time_wait_port, wait_for


def _listener(ip: str = "127.0.0.1", family: int = socket.AF_INET) -> socket.socket:
    sock = socket.socket(family)
    sock.bind((ip, 0))
    sock.listen(1)
    return sock


def _own() -> set:
    return {os.getpid()}


def test_a_socket_of_the_role_is_the_role_s():
    with _listener() as sock:
        port = sock.getsockname()[1]
        state = listeners.port_state("127.0.0.1", port, _own, os.getpid())
        assert state.holder is Holder.ROLE
        assert [s.port for s in state.sockets] == [port]


def test_nobody_listens_on_a_free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound, not listening
        port = sock.getsockname()[1]
        assert listeners.port_state("127.0.0.1", port, _own, os.getpid()).holder \
            is Holder.NOBODY


@pytest.mark.parametrize("bind_ip", ["", "127.0.0.1"])
def test_another_process_s_listener_is_foreign_and_named(bind_ip):
    code = ("import socket, sys; s = socket.socket(); s.bind((%r, 0)); s.listen(1); "
            "print(s.getsockname()[1], flush=True); sys.stdin.read()" % bind_ip)
    proc = subprocess.Popen([sys.executable, "-c", code],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        state = listeners.port_state("127.0.0.1", port, _own, os.getpid())
        assert state.holder is Holder.OTHER
        assert f"pid {proc.pid} (" in listeners.describe_holders(state.sockets)
        # the role's processes: a child in its process group holds the socket
        assert listeners.port_state("127.0.0.1", port, lambda: {proc.pid},
                                    os.getpid()).holder is Holder.ROLE
    finally:
        proc.stdin.close()
        proc.wait(10)


def test_a_listener_on_another_address_is_not_reached():
    with _listener("127.0.0.1") as sock:
        port = sock.getsockname()[1]
        assert listeners.port_state("127.0.0.2", port, tuple, os.getpid()).holder \
            is Holder.NOBODY


def test_an_ipv6_wildcard_listener_reaches_ipv4_addresses():
    try:
        sock = _listener("::", socket.AF_INET6)
    except OSError:
        pytest.skip("no IPv6 here")
    with sock:
        port = sock.getsockname()[1]
        state = listeners.port_state("127.0.0.1", port, tuple, os.getpid())
        assert state.holder is Holder.OTHER and state.sockets[0].ip == "::"


def test_a_role_s_processes_are_its_group_and_its_descendants():
    proc = subprocess.Popen(["sh", "-c", "sleep 30 & wait"], start_new_session=True)
    try:
        wait_for(lambda: len(procstat.members(proc.pid)) >= 2, 10, "the shell's child")
        found = procstat.members(proc.pid)
        assert proc.pid in found and os.getpid() not in found
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()


def test_a_port_left_in_time_wait_looks_free_and_a_listened_one_does_not():
    assert net.port_is_free("", time_wait_port())
    with _listener("") as sock:
        assert not net.port_is_free("", sock.getsockname()[1])


@given(low=st.integers(1024, 60000), size=st.integers(1, 1200))
def test_candidate_ports_offer_every_port_of_the_range_once(low, size):
    """Without a list of the range: each port once, none outside it, whatever the
    range's size (a prime, a power of two, one port)."""
    high = low + size - 1
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(net, "port_is_free", lambda ip, port: True)
        offered = list(net.candidate_ports(low, high))
    assert sorted(offered) == list(range(low, high + 1))


def test_candidate_ports_skip_a_listened_port_and_start_anywhere():
    with _listener("") as sock:
        busy = sock.getsockname()[1]
        assert busy not in net.candidate_ports(busy, busy + 3)
    firsts = {next(net.candidate_ports(40000, 40999, "127.0.0.1")) for _ in range(20)}
    assert len(firsts) > 1  # two jobs sharing the range rarely look at one port first


def test_member_ports_grow_with_the_rank_and_differ_between_jobs_of_one_shape():
    """Each member's port lies in its own window (so ps-lite's port order is mxbatch's
    rank order); two jobs of the same shape start their looks at different offsets, so
    that they do not race for the same first port."""
    def ports(job_id: str):
        return [net.member_port(9000, 9999, index, 5, "127.0.0.1", job_id=job_id)
                for index in range(5)]

    first, second = ports("train-0a1b2c3d"), ports("train-4e5f6a7b")
    for chosen in (first, second):
        assert all(p is not None for p in chosen)
        assert [(p - 9000) // 200 for p in chosen] == [0, 1, 2, 3, 4], chosen
    assert first == ports("train-0a1b2c3d")  # the same job: the same ports (attempts)
    assert first != second


@pytest.mark.parametrize("ip, family", [("127.0.0.1", socket.AF_INET), ("", socket.AF_INET),
                                        ("::", socket.AF_INET6), ("::1", socket.AF_INET6)])
def test_the_kernel_s_sock_diag_and_proc_see_the_same_listeners(ip, family):
    """``listeners`` asks sock_diag in its own network namespace; ``/proc``'s tables, which
    it reads for another namespace, say the same of the same socket."""
    try:
        sock = _listener(ip, family)
    except OSError:
        pytest.skip(f"cannot listen on {ip!r} here")
    with sock:
        port = sock.getsockname()[1]
        from_kernel = listeners.listeners(os.getpid(), port)
        from_proc = [found for text in listeners._tables(os.getpid())
                     for found in listeners.parse_listeners(text) if found.port == port]
        assert from_kernel == from_proc and len(from_kernel) == 1
        assert from_kernel[0].inode in listeners.socket_inodes([os.getpid()])


def test_a_listener_in_another_network_namespace_is_read_from_its_proc_tables():
    """A role in a network of its own (a container's): its listener is not in this
    namespace's sock_diag, and ``listeners`` finds it through the role's ``/proc``."""
    code = ("import socket, sys; s = socket.socket(); s.bind(('', 0)); s.listen(1); "
            "print(s.getsockname()[1], flush=True); sys.stdin.read()")
    try:
        proc = subprocess.Popen(["unshare", "--net", sys.executable, "-c", code],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    except OSError:
        pytest.skip("no unshare here")
    try:
        line = proc.stdout.readline()
        if not line:
            pytest.skip("unshare --net is not allowed here")
        port = int(line)
        assert not sockdiag.same_network(proc.pid)
        assert not sockdiag.tcp_sockets(1 << sockdiag.TCP_LISTEN, port=port)
        found = listeners.listeners(proc.pid, port)
        assert [(s.ip, s.port) for s in found] == [("0.0.0.0", port)]
    finally:
        proc.stdin.close()
        proc.wait(10)


def test_a_role_without_a_socket_is_answered_without_reading_the_table(monkeypatch):
    """A role still starting (importing MXNet: stdout and stderr are pipes, no socket
    yet) has not reached the scheduler, and saying so reads no connection table (4 ms
    a family, read by each agent once a second while its members start)."""
    reads = []
    tables = listeners._tables
    monkeypatch.setattr(listeners, "_tables", lambda pid: reads.append(pid) or tables(pid))
    with _listener() as server:
        role = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            assert not listeners.socket_inodes([role.pid])
            assert not listeners.ConnectionTables().connected_to([role.pid],
                                                                 *server.getsockname())
            assert reads == []
        finally:
            role.stdin.close()
            role.wait(10)


def test_a_round_of_looks_reads_each_namespace_s_connections_once(monkeypatch):
    """``ConnectionTables``: members that reached the scheduler are seen, one that did
    not is not, and the namespace's table is read once for the whole round (it lists
    every connection there: read once per member, 250 members a host cost each ssh
    agent 2-3 s of CPU a second)."""
    reads = []
    tables = listeners._tables
    monkeypatch.setattr(listeners, "_tables", lambda pid: reads.append(pid) or tables(pid))
    with _listener() as server:
        address = server.getsockname()
        clients, accepted = [], []
        for _ in range(3):  # one at a time: its backlog is 1
            clients.append(socket.create_connection(address))
            accepted.append(server.accept()[0])
        try:
            looks = listeners.ConnectionTables()
            own = [os.getpid()]
            assert all(looks.connected_to(own, *address) for _ in clients)
            other_port = address[1] + 1 if address[1] < 65535 else address[1] - 1
            assert not looks.connected_to(own, address[0], other_port)
            assert len(reads) == 2  # once for the scheduler's address, once for the other
            assert listeners.connected_to(own, *address)  # a look of its own reads again
            assert len(reads) == 3
        finally:
            for sock in clients + accepted:
                sock.close()
