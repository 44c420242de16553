"""What the ssh and MPI backends would run (``mxbatch render``): pure, no host needed."""

from __future__ import annotations

import json

from .conftest import write_spec


def spec(tmp_path, backend: str, options: str):
    (tmp_path / "hosts").write_text("node1\nnode2:2222 slots=1\nnode3\n")
    return write_spec(tmp_path / "job.yaml",
                      f"name: r\ncommand: python3 train.py\nroles: {{worker: {{count: 2}}}}\n"
                      f"backends:\n  {backend}: {{{options}}}\n")


def test_ssh_one_session_per_host_batch_mode_user_options_first(cli, tmp_path):
    (tmp_path / "ssh_config").write_text("Host *\n  User root\n")
    path = spec(tmp_path, "ssh", "hostfile: hosts, ssh_options: [-o, ConnectTimeout=3], "
                                 "config: ssh_config")
    result = cli.run("render", "--json", "-b", "ssh", str(path),
                     env={"AWS_SECRET_ACCESS_KEY": "not-in-argv"})
    assert result.returncode == 0, result.stderr
    hosts = json.loads(result.stdout)["native"]["setup"]["hosts"]
    # 5 tasks round-robin, node2 takes 1 slot: node1 0,3; node2 1; node3 2,4
    assert [(h["host"], h["tasks"]) for h in hosts] == [("node1", [0, 3]), ("node2:2222", [1]),
                                                        ("node3", [2, 4])]
    assert hosts[1]["ssh"] == [  # the user's options first: ssh takes the first value
        "ssh", "-T", "-o", "ConnectTimeout=3", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
        "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3",
        "-F", str(tmp_path / "ssh_config"), "-p", "2222", "--", "node2"]
    assert hosts[0]["remote"].startswith("exec env MXBATCH_JOB_ID=r-")
    assert "not-in-argv" not in result.stdout


def test_ssh_sync_dst_dir_copies_the_workdir_with_rsync(cli, tmp_path):
    path = spec(tmp_path, "ssh", "hostfile: hosts, sync_dst_dir: /scratch/r")
    result = cli.run("render", "-b", "ssh", str(path))
    assert result.returncode == 0, result.stderr
    assert "rsync (first): rsync -az -e 'ssh -T" in result.stdout
    assert f"{tmp_path}/ node3:/scratch/r/" in result.stdout
    # the session to each host is the master whose connection that host's rsync shares
    # (in the run directory: a short $MXBATCH_HOME, as ~/.mxbatch is, gives a short path)
    hosts = json.loads(cli.run("render", "--json", "-b", "ssh", str(path),
                               env={"MXBATCH_HOME": "/tmp/mxbatch-home"}).stdout)[
        "native"]["setup"]["hosts"]
    for index, host in enumerate(hosts):
        control = host["control_path"]
        assert control.endswith(f"/ssh/cm-{index}") and len(control) <= 90
        session = " ".join(host["ssh"])
        assert f"-o ControlMaster=yes -o ControlPersist=no -o ControlPath={control}" in session
        assert f"-o ControlMaster=no -o ControlPath={control}" in host["rsync"][3]


def test_ssh_sync_dst_dir_without_a_master_when_the_socket_path_is_too_long(cli, tmp_path):
    path = spec(tmp_path, "ssh", "hostfile: hosts, sync_dst_dir: /scratch/r")
    home = tmp_path / ("h" * 80)  # the run directory's path is longer than a socket's
    result = cli.run("render", "--json", "-b", "ssh", str(path),
                     env={"MXBATCH_HOME": str(home)})
    assert result.returncode == 0, result.stderr
    for host in json.loads(result.stdout)["native"]["setup"]["hosts"]:
        assert host["control_path"] == "" and "ControlPath" not in " ".join(
            host["ssh"] + host["rsync"])


def test_mpi_one_mpirun_one_agent_a_host(cli, tmp_path):
    """One rank on each host that takes tasks (one slot each in mpirun's hostfile), each
    rank the agent of the tasks dealt to its host: rank 0, on the first host, has the
    scheduler (task 0)."""
    path = spec(tmp_path, "mpi", "hostfile: hosts, extra: [--allow-run-as-root]")
    (tmp_path / "hosts").write_text("node1\nnode2 slots=1\nnode3\nspare\n")
    result = cli.run("render", "--json", "-b", "mpi", str(path))
    assert result.returncode == 0, result.stderr
    setup = json.loads(result.stdout)["native"]["setup"]
    assert setup["task_hosts"] == ["node1", "node2", "node3", "spare", "node1"]
    assert setup["hostfile_text"] == \
        "node1 slots=1\nnode2 slots=1\nnode3 slots=1\nspare slots=1\n"
    argv = setup["argv"]
    assert argv[:3] == ["mpirun", "-n", "4"]
    assert argv[argv.index("--map-by"):argv.index("--map-by") + 2] == ["--map-by", "node"]
    assert "--allow-run-as-root" in argv and argv.index("--allow-run-as-root") < argv.index(
        "python3")
    assert argv[-8:] == ["--task-from", "OMPI_COMM_WORLD_RANK,PMI_RANK", "--task-groups",
                         "0,4/1/2/3", "--environ-file", setup["environ_file"], "--exit-zero",
                         "--launcher-signals"]


def test_hosts_errors_name_the_key(cli, tmp_path):
    path = write_spec(tmp_path / "job.yaml", "name: r\ncommand: x\nbackends:\n  ssh: {}\n")
    result = cli.run("render", "-b", "ssh", str(path))
    assert result.returncode == 2 and "backends.ssh: no hosts" in result.stderr
    (tmp_path / "hosts").write_text("a slots=1\n")
    path = write_spec(tmp_path / "job.yaml",
                      "name: r\ncommand: x\nbackends:\n  mpi: {hostfile: hosts}\n")
    result = cli.run("render", "-b", "mpi", str(path))
    assert result.returncode == 2
    assert "job.yaml:4: backends.mpi.hostfile: the job has 3 tasks but the hosts offer 1 " \
           "slots" in result.stderr


def test_ssh_inside_an_oar_job_reaches_the_node_files_hosts_with_oarsh(cli, tmp_path):
    """Given no hosts, the ssh backend takes OAR_NODEFILE's (a line per core), and reaches
    them with OAR's oarsh unless ``backends.ssh.ssh`` names another client."""
    nodes = tmp_path / "nodefile"
    nodes.write_text("10.0.0.1\n10.0.0.1\n10.0.0.2\n")
    path = write_spec(tmp_path / "job.yaml", "name: r\ncommand: python3 train.py\n"
                      "roles: {worker: {count: 1}}\n")
    result = cli.run("render", "--json", "-b", "ssh", str(path),
                     env={"OAR_NODEFILE": str(nodes)})
    assert result.returncode == 0, result.stderr
    hosts = json.loads(result.stdout)["native"]["setup"]["hosts"]
    assert [(h["host"], h["ssh"][0], h["ssh"][-1]) for h in hosts] == [
        ("10.0.0.1", "oarsh", "10.0.0.1"), ("10.0.0.2", "oarsh", "10.0.0.2")]
    path.write_text(path.read_text() + "backends: {ssh: {ssh: /usr/bin/ssh}}\n")
    result = cli.run("render", "--json", "-b", "ssh", str(path),
                     env={"OAR_NODEFILE": str(nodes)})
    assert json.loads(result.stdout)["native"]["setup"]["hosts"][0]["ssh"][0] == "/usr/bin/ssh"
