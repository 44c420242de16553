"""What an agent reads of its roles' processes for stall detection: the walk from each
leader (and container root) through the kernel's children lists answers as one scan
of every process did, at a cost that does not grow with the machine's processes."""

import os
import signal
import subprocess
import sys

from mxbatch.runtime import procstat

from .conftest import wait_for

#: a role whose leader (sh) has a busy child, an idle child, and a child that left the
#: group (setsid: its own session, so not the role's)
ROLE = ("sleep 60 & %s -c 'while True: pass' & setsid sleep 60 & echo started; wait"
        % sys.executable)


def start_role():
    proc = subprocess.Popen(["sh", "-c", ROLE], start_new_session=True,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "started\n"
    return proc


def stop(proc):
    """Kill the role's whole tree, the child that left its group too."""
    tree = procstat.members(proc.pid)
    os.killpg(proc.pid, signal.SIGKILL)
    for pid in tree:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()
    wait_for(lambda: not (tree & procstat.members(proc.pid, tree)), 10, "the role's tree gone")


def test_the_walk_finds_what_the_scan_finds_and_not_what_left_the_group():
    proc = start_role()
    try:
        wait_for(lambda: procstat.snapshot([proc.pid]).get(proc.pid, procstat.GroupStat(
            0, 0, False)).processes == 3, 10, "the leader and its 2 children in the group")
        walked = procstat.snapshot([proc.pid])[proc.pid]
        scanned = procstat._scanned([proc.pid], [])[proc.pid]
        assert sorted(walked.pids) == sorted(scanned.pids) and len(walked.pids) == 3
        assert abs(walked.cpu_ticks - scanned.cpu_ticks) <= 10  # the busy child runs on
        assert not walked.leader_stopped
        # a container's root: its whole tree, whatever the groups (the setsid child too)
        assert procstat.snapshot([], [proc.pid])[proc.pid].processes == 4
        os.kill(proc.pid, signal.SIGSTOP)
        wait_for(lambda: procstat.snapshot([proc.pid])[proc.pid].leader_stopped, 10,
                 "the stopped leader")
        os.kill(proc.pid, signal.SIGCONT)
    finally:
        stop(proc)
    assert proc.pid not in procstat.snapshot([proc.pid])  # gone: left out
