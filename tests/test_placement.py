"""Placement sources (backends/hosts/placement.py): allocation node files, SGE's
PE_HOSTFILE and a Slurm allocation's nodes, parsed from real files; the GPUs of a Slurm
allocation's nodes from ``scontrol show job -d`` (its text as Slurm 22.05 prints it) and
the placement of tasks that ask for GPUs; and through the CLI: --launcher ssh/mpi
without -H takes the node file (render and doctor name it), bad node files, an
in-allocation backend outside an allocation (exit 2, nothing created)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mxbatch.backends.hosts import placement
from mxbatch.backends.hosts.hostfile import GpuShortage, Host
from mxbatch.errors import SpecError

from .conftest import FAKEROLE, cluster_environment


def test_a_pbs_node_file_gives_a_slot_a_line_in_order_of_first_appearance(tmp_path):
    nodes = tmp_path / "nodes"
    nodes.write_text("n2\nn2\nn1\n\nn2\nn3 # comment words\n")
    found = placement.node_file("PBS_NODEFILE", str(nodes))
    assert found.hosts == (Host("n2", slots=3), Host("n1", slots=1), Host("n3", slots=1))
    assert found.source == f"PBS_NODEFILE {nodes}"
    assert found.deal(5) == [0, 1, 2, 0, 0]


def test_the_node_file_variables_in_order_and_lsf_hosts(tmp_path):
    pbs, lsf = tmp_path / "pbs", tmp_path / "lsf"
    pbs.write_text("a\n")
    lsf.write_text("b\nb\n")
    env = {"PBS_NODEFILE": str(pbs), "LSB_DJOB_HOSTFILE": str(lsf), "LSB_HOSTS": "c c"}
    assert placement.allocation_node_file(env).hosts == (Host("a", slots=1),)
    del env["PBS_NODEFILE"]
    assert placement.allocation_node_file(env).hosts == (Host("b", slots=2),)
    del env["LSB_DJOB_HOSTFILE"]
    found = placement.allocation_node_file(env)
    assert found.hosts == (Host("c", slots=2),) and found.source.startswith("LSB_HOSTS")
    assert placement.allocation_node_file({}) is None


@pytest.mark.parametrize("content,words", [
    (None, "cannot be read: No such file or directory"),
    ("", "lists no hosts"),
    ("\n# only a comment\n", "lists no hosts"),
    ("good\nbad;host\n", "'bad;host' is not a host name"),
])
def test_bad_node_files_are_spec_errors(tmp_path, content, words):
    path = tmp_path / "nodes"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SpecError, match=words) as info:
        placement.allocation_node_file({"PBS_NODEFILE": str(path)})
    assert info.value.exit_code == 2 and "PBS_NODEFILE" in str(info.value)


def test_an_empty_variable_is_a_spec_error():
    with pytest.raises(SpecError, match=r"\$PBS_NODEFILE is set but empty"):
        placement.allocation_node_file({"PBS_NODEFILE": ""})


def test_sges_pe_hostfile_adds_up_a_hosts_slots_over_queues(tmp_path):
    path = tmp_path / "pe_hostfile"
    path.write_text("mxbh2 2 all.q@mxbh2 UNDEFINED\nmxbh1 1 all.q@mxbh1 UNDEFINED\n"
                    "mxbh2 1 tiny.q@mxbh2 UNDEFINED\n")
    found = placement.pe_hostfile(str(path))
    assert found.hosts == (Host("mxbh2", slots=3), Host("mxbh1", slots=1))
    with pytest.raises(ValueError, match="5 tasks but the hosts offer 4 slots"):
        found.deal(5)
    path.write_text("mxbh2 two all.q@mxbh2 UNDEFINED\n")
    with pytest.raises(SpecError, match="line 1: expected 'HOST SLOTS QUEUE PROCESSORS'"):
        placement.pe_hostfile(str(path))


def test_slurm_cpu_counts():
    assert placement.expand_repeats("4(x2),2", "X") == [4, 4, 2]
    assert placement.expand_repeats("1", "X") == [1]
    with pytest.raises(SpecError, match="expected counts such as"):
        placement.expand_repeats("4(y2)", "X")


@pytest.mark.slurm
def test_a_slurm_allocation_fills_its_nodes_by_cpus_or_deals_evenly(monkeypatch):
    # scontrol show hostnames asks no daemon, but wants a configuration to read
    monkeypatch.setenv("SLURM_CONF", cluster_environment("slurm")["SLURM_CONF"])
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node[1-2],gpu7",
           "SLURM_JOB_CPUS_PER_NODE": "2(x2),4"}
    found = placement.slurm_allocation(env, tasks=5)
    assert [h.name for h in found.hosts] == ["node1", "node2", "gpu7"]
    assert [h.slots for h in found.hosts] == [2, 2, 4]
    assert found.deal(5) == [0, 1, 2, 0, 1]
    # salloc -N 3 grants a CPU a node: 5 tasks share them, dealt evenly
    env["SLURM_JOB_CPUS_PER_NODE"] = "1(x3)"
    found = placement.slurm_allocation(env, tasks=5)
    assert all(h.slots is None for h in found.hosts)
    assert found.deal(5) == [0, 1, 2, 0, 1] and "roles share a node's CPUs" in found.source


#: ``scontrol show job -d`` of ``salloc -N 2 --gres=gpu:2`` on the test cluster (Slurm
#: 22.05.8), trimmed
SHOW_JOB = """\
JobId=8 JobName=interactive
   JobState=RUNNING Reason=None Dependency=(null)
   NodeList=mxbh[1-2]
   BatchHost=mxbh1
   NumNodes=2 NumCPUs=2 NumTasks=2 CPUs/Task=1 ReqB:S:C:T=0:0:*:*
   TRES=cpu=2,node=2,billing=2
   JOB_GRES=gpu:4
     Nodes=mxbh1 CPU_IDs=0 Mem=0 GRES=gpu:2(IDX:0-1)
     Nodes=mxbh2 CPU_IDs=3 Mem=0 GRES=gpu:2(IDX:0-1)
   MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0
   TresPerNode=gres:gpu:2
"""


def test_the_gpus_of_each_node_from_scontrol_show_job_details():
    assert placement.job_gpus(SHOW_JOB) == [("mxbh1", 2), ("mxbh2", 2)]
    # salloc --gpus=3 -N 2: uneven; identical nodes compressed; no GRES at all
    text = ("     Nodes=mxbh1 CPU_IDs=0 Mem=0 GRES=gpu:2(IDX:0-1)\n"
            "     Nodes=mxbh2 CPU_IDs=3 Mem=0 GRES=gpu:1(IDX:0)\n"
            "     Nodes=gpu[1-4] CPU_IDs=0-3 Mem=1024 GRES=\n"
            "   ReqNodeList=(null) ExcNodeList=(null)\n   NumNodes=2\n")
    assert placement.job_gpus(text) == [("mxbh1", 2), ("mxbh2", 1), ("gpu[1-4]", 0)]
    assert placement.job_gpus("JobId=9 JobName=x\n   NodeList=n1\n") == []


@pytest.mark.parametrize("gres,gpus", [
    ("gpu:2(IDX:0-1)", 2), ("gpu:a100:1(IDX:3)", 1), ("gpu(IDX:0-1,3)", 3),
    ("gpu:a100:1(IDX:3),gpu:v100:2(IDX:0-1)", 3), ("mps:100(0/100),gpu:4(IDX:0-3)", 4),
    ("gpu:2", 2), ("gpu:2(IDX:N/A)", 2), ("", 0), ("mps:100(0/100)", 0), ("gpuX:2", 0),
])
def test_a_nodes_gres_value_counts_its_gpus(gres, gpus):
    assert placement.gres_gpus(gres) == gpus


def test_gpus_bound_the_tasks_a_node_takes():
    hosts = (Host("a"), Host("b"))
    # scheduler, server, 4 workers of 1 GPU over 2 nodes of 2: two workers a node
    found = placement.Placement(hosts, "test", gpus=(2, 2))
    assert found.deal(6, [0, 0, 1, 1, 1, 1]) == [0, 1, 0, 1, 0, 1]
    # a node without GPUs takes only tasks without: the workers go to the other
    found = placement.Placement(hosts, "test", gpus=(0, 2))
    assert found.deal(4, [0, 0, 1, 1]) == [0, 1, 1, 1]
    with pytest.raises(GpuShortage, match=r"ask for 3 GPUs in all but the hosts hold 2 "
                                          r"\(a: 0, b: 2\)") as short:
        found.deal(4, [0, 1, 1, 1])
    assert short.value.task is None
    # enough in all, but no node holds 3
    found = placement.Placement(hosts, "test", gpus=(2, 2))
    with pytest.raises(GpuShortage, match=r"no host with a free slot has 3 GPUs left") as short:
        found.deal(3, [0, 0, 3])
    assert short.value.task == 2
    # not counted: GPUs are not placed (ssh hosts, an SGE parallel job)
    assert placement.Placement(hosts, "test").deal(3, [0, 9, 9]) == [0, 1, 0]


# ----------------------------------------------------------------------------- the CLI


def test_launcher_ssh_without_hosts_renders_the_node_file(cli, tmp_path):
    nodes = tmp_path / "nodes"
    nodes.write_text("mxbh1\nmxbh1\nmxbh2\n")
    result = cli.run("render", "--backend", "ssh", "--json", str(_spec(tmp_path)),
                     env={"PBS_NODEFILE": str(nodes)})
    assert result.returncode == 0, result.stderr
    assert f'"hosts_from": "PBS_NODEFILE {nodes}"' in result.stdout
    text = cli.run("render", "--backend", "mpi", str(_spec(tmp_path)),
                   env={"PBS_NODEFILE": str(nodes)}).stdout
    assert f"## hosts\nfrom PBS_NODEFILE {nodes}\n" in text
    assert "mxbh1 slots=2\nmxbh2 slots=1\n" in text  # mpirun's hostfile


@pytest.mark.parametrize("content,words", [
    (None, "cannot be read"), ("", "lists no hosts"),
    ("mxbh1\n", "the job has 3 tasks but the hosts offer 1 slots"),
])
def test_bad_node_files_exit_2_and_create_nothing(cli, tmp_path, content, words):
    nodes = tmp_path / "nodes"
    if content is not None:
        nodes.write_text(content)
    result = cli.run("launch", "--launcher", "ssh", "--", "true",
                     env={"PBS_NODEFILE": str(nodes)})
    assert result.returncode == 2, result.stderr
    assert words in result.stderr and "PBS_NODEFILE" in result.stderr
    assert "Traceback" not in result.stderr
    assert cli.run_dirs() == []


def test_doctor_names_the_node_file(cli, tmp_path):
    nodes = tmp_path / "nodes"
    nodes.write_text("mxbh1\nmxbh2\nmxbh2\n")
    result = cli.run("doctor", "--backend", "ssh", "--no-probe", "--json",
                     env={"PBS_NODEFILE": str(nodes)})
    assert f"from PBS_NODEFILE {nodes}: 2 hosts, 3 slots" in result.stdout, result.stdout
    result = cli.run("doctor", "--backend", "ssh", "--no-probe",
                     env={"PBS_NODEFILE": str(tmp_path / "missing")})
    assert "FAIL  hosts" in result.stdout and "cannot be read" in result.stdout


@pytest.mark.parametrize("backend,key,variable", [("slurm", "slurm", "SLURM_JOB_ID"),
                                                  ("sge", "sge", "PE_HOSTFILE")])
def test_inside_true_without_an_allocation_exits_2(cli, tmp_path, backend, key, variable):
    spec = _spec(tmp_path, f"backends: {{{key}: {{inside: true}}}}\n")
    env = {name: "" for name in ("SLURM_JOB_ID", "PE_HOSTFILE", "JOB_ID")}
    result = cli.run("submit", "--backend", backend, str(spec), env=env)
    assert result.returncode == 2, result.stderr
    assert f"job.yaml:6: backends.{key}.inside: inside: true, but this process is not " \
           "inside" in result.stderr
    assert f"({variable} is not set): nothing was started" in result.stderr
    assert cli.run_dirs() == [] and not (cli.home / "jobs").exists()


def test_inside_false_submits_as_before_even_in_an_allocation(cli, tmp_path):
    spec = _spec(tmp_path, "backends: {slurm: {inside: false}}\n")
    result = cli.run("render", "--backend", "slurm", str(spec),
                     env={"SLURM_JOB_ID": "5", "SLURM_JOB_NODELIST": "n1"})
    assert result.returncode == 0, result.stderr
    assert "sbatch --parsable" in result.stdout and "## allocation" not in result.stdout


def test_a_pe_hostfile_without_enough_slots_exits_2(cli, tmp_path):
    pe = tmp_path / "pe_hostfile"
    pe.write_text("mxbh1 1 all.q@mxbh1 UNDEFINED\nmxbh2 1 all.q@mxbh2 UNDEFINED\n")
    result = cli.run("launch", "--backend", "sge", "-n", "2", "-s", "1", "--", "true",
                     env={"PE_HOSTFILE": str(pe), "JOB_ID": "12"})
    assert result.returncode == 2, result.stderr
    assert f"PE_HOSTFILE {pe}: the job has 4 tasks but the hosts offer 2 slots granted" \
           in result.stderr and "nothing was started" in result.stderr
    assert cli.run_dirs() == []


def _spec(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(f"name: job\ncommand: [python3, {FAKEROLE}]\nworkdir: {tmp_path}\n"
                    "roles: {worker: {count: 1}, server: {count: 1}}\n"
                    "rendezvous: {startup_timeout: 2m}\n" + extra)
    return path
