"""A role's ``memory`` and ``cpus`` on the local backend (issue 38, friction 7): held by
the job's cgroups where the machine offers the controllers, else memory as
RLIMIT_DATA, and said in the role's log; never silently ignored."""

from __future__ import annotations

from pathlib import Path

from mxbatch.runtime import limits

from .conftest import write_spec

#: a role that maps more than its memory: 600 MiB under a 256 MiB limit
GREEDY = ("import os, sys\n"
          "if os.environ['DMLC_ROLE'] == 'worker':\n"
          "    data = bytearray(600 << 20)\n"
          "    print('allocated', len(data), flush=True)\n")


def test_a_role_past_its_memory_fails_the_job(cli, tmp_path):
    (tmp_path / "greedy.py").write_text(GREEDY)
    spec = write_spec(tmp_path / "j.yaml",
                      "command: python3 greedy.py\n"
                      "roles: {worker: {count: 1, resources: {memory: 256M}},"
                      " server: {count: 1}}\n"
                      "rendezvous: {grace: 2s}\n")
    result = cli.run("submit", "--wait", str(spec), timeout=180)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "MemoryError" in result.stdout + result.stderr
    log = (cli.run_dirs()[0] / "logs" / "worker-0.log").read_text()
    assert "memory: at most 256 MiB" in log
    assert "allocated" not in log


def test_a_role_within_its_memory_succeeds(cli, tmp_path):
    (tmp_path / "greedy.py").write_text(GREEDY)
    spec = write_spec(tmp_path / "j.yaml",
                      "command: python3 greedy.py\n"
                      "roles: {worker: {count: 1, resources: {memory: 1G}},"
                      " server: {count: 1}}\n"
                      "rendezvous: {grace: 2s}\n")
    result = cli.run("submit", "--wait", str(spec), timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr


def _fake_cgroup(root: Path, offered: str) -> Path:
    agent = root / "mxbatch.job.1.0"
    (agent / "worker-0").mkdir(parents=True)
    (agent / "cgroup.controllers").write_text(offered + "\n")
    (agent / "cgroup.subtree_control").write_text("")
    return agent


def test_controllers_offered_are_enabled_in_the_agents_cgroup_and_set(tmp_path,
                                                                     monkeypatch):
    agent = _fake_cgroup(tmp_path, "cpu io memory pids")
    written = []

    def write(path: str, text: str) -> bool:  # the kernel reads "+a +b" back as "a b"
        written.append((Path(path).name, text))
        Path(path).write_text(text.replace("+", "") if "subtree" in path else text)
        return True

    monkeypatch.setattr(limits, "_write", write)
    held = limits.enforce(str(agent), str(agent / "worker-0"), 512, 2, False)
    assert (held.memory, held.cpus, held.rlimit_data) == (limits.Means.CGROUP,
                                                          limits.Means.CGROUP, None)
    assert written[0] == ("cgroup.subtree_control", "+cpu +memory")
    assert (agent / "worker-0" / "memory.max").read_text() == str(512 << 20)
    assert (agent / "worker-0" / "cpu.max").read_text() == "200000 100000"


def test_without_controllers_memory_is_a_data_limit_and_cpus_are_said_unenforced(tmp_path):
    agent = _fake_cgroup(tmp_path, "hugetlb")
    held = limits.enforce(str(agent), str(agent / "worker-0"), 512, 2, False)
    assert (held.memory, held.cpus, held.rlimit_data) == (limits.Means.RLIMIT,
                                                          limits.Means.NONE, 512 << 20)
    assert not (agent / "worker-0" / "memory.max").exists()
    assert any("RLIMIT_DATA" in n for n in held.notes)
    assert any("cpus: 2 not enforced" in n for n in held.notes)
    assert (agent / "cgroup.subtree_control").read_text() == ""


def test_a_daemon_container_is_said_unenforced(tmp_path):
    held = limits.enforce(None, None, 512, 1, True)
    assert held.rlimit_data is None and "container.options" in held.notes[0]


def test_only_the_local_backend_enforces():
    assert limits.applies(True) and not limits.applies(False)


BIG = ("command: python3 t.py\n"
       "resources: {memory: 1G}\n"
       "roles: {worker: {count: 300}, server: {count: 300}}\n")


def test_doctor_warns_when_the_machine_cannot_hold_the_job(cli, tmp_path):
    (tmp_path / "t.py").write_text("")
    spec = write_spec(tmp_path / "big.yaml", BIG)
    result = cli.run("doctor", "--no-probe", str(spec), timeout=300)
    capacity = [line for line in result.stdout.splitlines() if "capacity" in line]
    assert capacity and capacity[0].startswith("WARN"), result.stdout
    assert "601 tasks ask for 601.0 GiB of memory" in capacity[0]
    assert "role limits" in result.stdout


def test_capacity_counts_every_task_at_once():
    from mxbatch.backends.capacity import Machine, shortfalls
    from mxbatch.spec import config as siteconfig
    from mxbatch.spec import plan as planning

    spec = siteconfig.load_job(write_spec(Path("/tmp") / f"cap-{id(Machine)}.yaml", BIG))
    run = planning.make(spec, "local", loopback_only=True, max_tasks=1000).run
    found = shortfalls(run, Machine(cores=2, memory_mib=23 * 1024))
    assert len(found) == 2 and "601 CPU cores" in found[1]
    assert shortfalls(run, Machine(cores=1024, memory_mib=1024 * 1024)) == []


def test_submit_warns_when_the_machine_cannot_hold_the_job(cli, tmp_path):
    (tmp_path / "t.py").write_text("")
    spec = write_spec(tmp_path / "j.yaml", "command: python3 t.py\n"
                                           "resources: {memory: 100000G}\n")
    result = cli.run("submit", "--wait", "--quiet", str(spec), timeout=180)
    assert "warning: the 3 tasks ask for" in result.stderr
