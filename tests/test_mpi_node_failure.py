"""The MPI backend's node failures, without hosts: which host mpirun's output blames
(the texts measured on the test hosts, tests/test_ssh_restarts.py kills the session for
real), named as the hostfile names it, and how a relaunch deals the tasks to the other
hosts (the same dealing as ``render``) in a hostfile of its own."""

from __future__ import annotations

import json

from mxbatch.backends.hosts.hostfile import Host, parse_entry
from mxbatch.backends.hosts.mpi import (
    MpiBackend,
    MpiFlavor,
    MpiSetup,
    attempt_argv,
    blamed_hosts,
    deal,
    host_aliases,
    hostfile_path,
    lost_daemons,
    place_attempt,
)
from mxbatch.runtime.jobloop import AttemptContext
from mxbatch.runtime.layout import RunLayout
from mxbatch.runtime.roles import Role
from mxbatch.runtime.states import EndReason, SchedulerRecord, TaskRecord, TaskState
from mxbatch.spec.typed import to_data

from .conftest import write_spec

#: mpirun.log of Open MPI 4.1.4 when the sshd session of mxbh3's orted was killed (the
#: agents' own lines at its end)
SSHD_KILLED = """\
Connection to 10.213.57.13 closed by remote host.
--------------------------------------------------------------------------
ORTE was unable to reliably start one or more daemons.
This usually is caused by:

* not finding the required libraries and/or binaries on
  one or more nodes. Please check your PATH and LD_LIBRARY_PATH
  settings, or configure OMPI with --enable-orterun-prefix-by-default
--------------------------------------------------------------------------
mxbatch: worker[1] received SIGTERM: stopping the job
mxbatch: scheduler[0] received SIGTERM: stopping the job
"""

#: mpirun.log of Open MPI 4.1.4 when mxbh3's orted was SIGKILLed (the HNP, mpirun, runs on
#: the submit host, "vm")
DAEMON_LOST = """\
--------------------------------------------------------------------------
ORTE has lost communication with a remote daemon.

  HNP daemon   : [[12765,0],0] on node vm
  Remote daemon: [[12765,0],3] on node mxbh3

This is usually due to either a failure of the TCP network
connection to the node, or possibly an internal failure of
the daemon itself. We cannot recover from this failure, and
therefore will terminate the job.
--------------------------------------------------------------------------
mxbatch: scheduler[0] received SIGTERM: stopping the job
"""


def record(role: str, rank: int, host: str, address: str = "") -> TaskRecord:
    return TaskRecord(role=Role(role), rank=rank, state=TaskState.RUNNING, host=host,
                      address=address)


def test_the_host_whose_daemon_was_lost_is_read_from_mpiruns_words():
    assert lost_daemons(SSHD_KILLED) == ["10.213.57.13"]
    assert lost_daemons(DAEMON_LOST) == ["mxbh3"]  # not the HNP's node
    assert lost_daemons("Timeout, server node7 not responding.\n") == ["node7"]
    # a failure that lost no host (an agent died), and the agents' own lines
    assert lost_daemons("mpirun noticed that process rank 3 with PID 0 on node mxbh4 "
                        "exited on signal 9 (Killed).\n") == []
    assert lost_daemons("mxbatch: Connection to mxbh2 closed by remote host.\n") == []


def test_the_named_host_is_the_hostfiles_through_the_attempts_records():
    task_hosts = ("mxbh1", "mxbh2", "mxbh3", "mxbh4", "mxbh1")
    records = [(1, record("server", 0, "mxbh2", "10.213.57.12:9200")),
               (2, record("server", 1, "mxbh3.cluster.example", "10.213.57.13:9400")),
               (3, record("worker", 0, "mxbh4", "10.213.57.14:9600"))]
    aliases = host_aliases(task_hosts, records,
                           SchedulerRecord(job_id="j", ip="10.213.57.11", port=9000,
                                           host="mxbh1"))
    assert blamed_hosts(lost_daemons(SSHD_KILLED), aliases) == ("mxbh3",)  # ssh's address
    assert blamed_hosts(lost_daemons(DAEMON_LOST), aliases) == ("mxbh3",)  # its host name
    assert blamed_hosts(["mxbh3.cluster.example"], aliases) == ("mxbh3",)  # the FQDN
    assert blamed_hosts(["10.213.57.11", "mxbh1"], aliases) == ("mxbh1",)  # the scheduler's
    assert blamed_hosts(["10.0.0.9"], aliases) == ()  # no host of the job
    # a hostfile of addresses: Open MPI names the host by its host name
    by_address = host_aliases(("10.0.0.1", "10.0.0.2"),
                              [(1, record("worker", 0, "gpu2.example", "10.0.0.2:9600"))])
    assert blamed_hosts(lost_daemons(DAEMON_LOST.replace("mxbh3", "gpu2")),
                        by_address) == ("10.0.0.2",)
    # a user@ in the hostfile: mpirun names the host without it
    assert blamed_hosts(["n2"], host_aliases(("me@n2",), [])) == ("me@n2",)


def setup_of(entries, tasks: int = 5, flavor: MpiFlavor = MpiFlavor.OPENMPI) -> MpiSetup:
    hosts = [parse_entry(e) for e in entries]
    dealing = deal(hosts, tasks, flavor)
    return MpiSetup(argv=("mpirun", "-n", str(dealing.ranks), "--hostfile",
                          "/run/mpi/hostfile", "python3", "runtime.pyz", "--task-groups",
                          dealing.groups),
                    hostfile="/run/mpi/hostfile", hostfile_text=dealing.hostfile_text,
                    environ_file="", task_hosts=dealing.task_hosts, flavor=flavor.value,
                    hosts=tuple(entries))


def test_a_relaunch_deals_the_tasks_to_the_other_hosts():
    setup = setup_of(["mxbh1", "mxbh2", "mxbh3", "mxbh4"])
    assert setup.argv[-1] == "0,4/1/2/3"
    assert place_attempt(setup, (), 5) == (setup.hostfile_text, setup.task_hosts, "")
    dealing = place_attempt(setup, ("mxbh3",), 5)
    assert dealing.hostfile_text == "mxbh1 slots=1\nmxbh2 slots=1\nmxbh4 slots=1\n"
    assert dealing.task_hosts == ("mxbh1", "mxbh2", "mxbh4", "mxbh1", "mxbh2")
    assert (dealing.groups, dealing.ranks) == ("0,3/1,4/2", 3)
    # slots= as the hostfile gave them are honoured
    setup = setup_of(["a slots=1", "b", "c slots=1"])
    assert setup.argv[-1] == "0/1,3,4/2"
    assert place_attempt(setup, ("c",), 5).groups == "0/1,2,3,4"
    # a host spare in the first attempt (more hosts than tasks) takes tasks
    setup = setup_of(["a", "b", "c", "spare"], tasks=3)
    assert setup.hostfile_text == "a slots=1\nb slots=1\nc slots=1\n"
    assert place_attempt(setup, ("b",), 3) == ("a slots=1\nc slots=1\nspare slots=1\n",
                                               ("a", "c", "spare"), "0/1/2")
    dealing = place_attempt(setup_of(["a", "b", "c"], flavor=MpiFlavor.MPICH), ("c",), 5)
    assert (dealing.hostfile_text, dealing.groups) == ("a:1\nb:1\n", "0,2,4/1,3")


def test_a_relaunch_the_other_hosts_cannot_hold_is_not_usable(tmp_path):
    plan = type("Plan", (), {"tasks": [object()] * 5})()
    config = to_data(setup_of(["a slots=2", "b slots=2", "c slots=1"]))
    assert MpiBackend.usable(config, plan, []) is None
    assert MpiBackend.usable(config, plan, ["c"]) == \
        "without c: the job has 5 tasks but the hosts offer 4 slots"
    assert MpiBackend.usable(config, plan, ["a", "b", "c"]) == "without a, b, c: no host is left"
    older = dict(config, hosts=[])  # a configuration without its hosts
    assert "does not list its hosts" in MpiBackend.usable(older, plan, ["c"])


def test_a_relaunch_runs_mpirun_with_its_own_hostfile():
    setup = setup_of(["mxbh1", "mxbh2", "mxbh3", "mxbh4"])
    layout = RunLayout("/run", 1)
    assert hostfile_path(RunLayout("/run")) == "/run/mpi/hostfile"
    assert hostfile_path(layout) == "/run/attempts/1/mpi/hostfile"
    attempt = AttemptContext(1, EndReason.NODE_FAILURE, ("mxbh3",), 0.0)
    argv = attempt_argv(setup, attempt, hostfile_path(layout),
                        place_attempt(setup, ("mxbh3",), 5))
    assert argv[argv.index("--hostfile") + 1] == "/run/attempts/1/mpi/hostfile"
    assert argv[:3] == ["mpirun", "-n", "3"] and argv[-1] == "0,3/1,4/2"
    assert "MXBATCH_RESTART_REASON=node_failure" in argv
    assert attempt_argv(setup, attempt, None, place_attempt(setup, (), 5))[-1] == "0,4/1/2/3"
    assert attempt_argv(setup, attempt._replace(index=0, excluded=())) == list(setup.argv)


def test_render_keeps_every_host_with_its_slots_for_a_relaunch(cli, tmp_path):
    (tmp_path / "hosts").write_text("node1\nnode2 slots=1\nnode3\nnode4\n")
    path = write_spec(tmp_path / "job.yaml", "name: r\ncommand: python3 train.py\n"
                      "roles: {worker: {count: 1}}\nbackends:\n  mpi: {hostfile: hosts}\n")
    result = cli.run("render", "--json", "-b", "mpi", str(path))
    assert result.returncode == 0, result.stderr
    setup = json.loads(result.stdout)["native"]["setup"]
    assert setup["hosts"] == ["node1", "node2 slots=1", "node3", "node4"]  # node4: spare
    assert setup["hostfile_text"] == "node1 slots=1\nnode2 slots=1\nnode3 slots=1\n"
    assert [Host(name="n", slots=2).entry, Host(name="n", port=22).entry] == \
        ["n slots=2", "n:22"]
