"""Placement sources (backends/hosts/placement.py): allocation node files, SGE's
PE_HOSTFILE and a Slurm allocation's nodes, parsed from real files; the GPUs of a Slurm
allocation's nodes from ``scontrol show job -d`` (its text as Slurm 22.05 prints it) and
the placement of tasks that ask for GPUs; and through the CLI: --launcher ssh/mpi
without -H takes the node file (render and doctor name it), bad node files, an
in-allocation backend outside an allocation (exit 2, nothing created), the steps of a
GPU job inside a Slurm allocation (a stand-in scontrol on PATH) and too few GPUs."""

from __future__ import annotations

import os
import sys
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
    pbs, oar, lsf = tmp_path / "pbs", tmp_path / "oar", tmp_path / "lsf"
    pbs.write_text("a\n")
    oar.write_text("10.0.0.1\n10.0.0.1\n10.0.0.2\n")  # OAR_NODEFILE: a line per core
    lsf.write_text("b\nb\n")
    env = {"PBS_NODEFILE": str(pbs), "OAR_NODEFILE": str(oar), "LSB_DJOB_HOSTFILE": str(lsf),
           "LSB_HOSTS": "c c"}
    assert placement.allocation_node_file(env).hosts == (Host("a", slots=1),)
    del env["PBS_NODEFILE"]
    assert placement.allocation_node_file(env).hosts == (Host("10.0.0.1", slots=2),
                                                         Host("10.0.0.2", slots=1))
    del env["OAR_NODEFILE"]
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
    with pytest.raises(GpuShortage, match=r"ask for 3 GPUs in all but the hosts hold 2$") \
            as short:
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
    assert "mxbh1 slots=1\nmxbh2 slots=1\n" in text  # mpirun's hostfile: a rank a host
    assert "--task-groups 0,2/1 " in text  # mxbh1's agent has tasks 0 and 2


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


#: a stand-in ``scontrol`` for a GPU allocation without a cluster: ``show hostnames``
#: expands ``n[1-2]``-style lists, ``show job -d`` prints $FAKE_SHOW_JOB (exit 1 if unset)
FAKE_SCONTROL = f"""#!{sys.executable}
import os, re, sys
args = sys.argv[1:]
if args[:2] == ["show", "hostnames"]:
    for part in re.findall(r"[^,\\[]+(?:\\[[^]]*\\])?", args[2]):
        m = re.fullmatch(r"(.*)\\[(\\d+)-(\\d+)\\]", part)
        names = [m.group(1) + str(i) for i in range(int(m.group(2)), int(m.group(3)) + 1)] \\
            if m else [part]
        print("\\n".join(names))
elif args[:3] == ["show", "job", "-d"] and os.environ.get("FAKE_SHOW_JOB"):
    print(open(os.environ["FAKE_SHOW_JOB"]).read())
else:
    sys.exit("scontrol: unexpected " + " ".join(args))
"""


def _allocation(tmp_path: Path, show_job: str = SHOW_JOB) -> dict:
    """The environment of a shell in ``salloc -N 2`` (job 8), with a stand-in scontrol."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(FAKE_SCONTROL)
    scontrol.chmod(0o755)
    (tmp_path / "show-job").write_text(show_job)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "SLURM_JOB_ID": "8",
            "SLURM_JOB_NODELIST": "mxbh[1-2]", "SLURM_JOB_CPUS_PER_NODE": "1(x2)",
            "FAKE_SHOW_JOB": str(tmp_path / "show-job")}


def _srun_lines(text: str) -> list:
    return [line for line in text.splitlines() if line.startswith("srun: ")]


def test_the_steps_of_a_gpu_job_in_a_slurm_allocation_ask_for_their_nodes_gpus(cli,
                                                                               tmp_path):
    """4 workers of 1 GPU over 2 nodes of 2: each node's step asks for 2, with srun's GPU
    request variables removed; its agent is told to share them out. A job that asks for
    no GPUs renders its steps as before, without asking slurmctld anything."""
    spec = _spec(tmp_path, "", workers="{count: 4, resources: {gpus: 1}}")
    env = _allocation(tmp_path)
    result = cli.run("render", "--backend", "slurm", str(spec), env=env)
    assert result.returncode == 0, result.stderr
    assert "GPUs (scontrol show job -d): mxbh1 2, mxbh2 2" in result.stdout
    steps = _srun_lines(result.stdout)
    assert len(steps) == 2, result.stdout
    for node, line in zip(("mxbh1", "mxbh2"), steps):
        assert line.startswith("srun: env -u SLURM_GPUS -u SLURM_GPUS_PER_NODE "), line
        assert f"--nodelist={node} " in line and " --gpus=2 " in line, line
    assert result.stdout.count("MXBATCH_GPU_SHARES=1") == 2, result.stdout
    # the same job without GPUs: no scontrol show job (the stand-in would fail it)
    plain = _spec(tmp_path, "")
    result = cli.run("render", "--backend", "slurm", str(plain),
                     env=dict(env, FAKE_SHOW_JOB=""))
    assert result.returncode == 0, result.stderr
    assert "GPUs" not in result.stdout and "MXBATCH_GPU_SHARES" not in result.stdout
    assert all(line.startswith("srun: srun --jobid=8 ") and "--gres" not in line
               for line in _srun_lines(result.stdout)), result.stdout


def test_a_node_whose_tasks_ask_for_no_gpu_gets_a_step_without_any(cli, tmp_path):
    """1 worker of 1 GPU: it goes with the scheduler (task 2 on the first node again),
    and the server's node's step asks for none (--gres=none: a step that asks for
    nothing would get all of the node's)."""
    spec = _spec(tmp_path, "", workers="{count: 1, resources: {gpus: 1}}")
    result = cli.run("render", "--backend", "slurm", str(spec), env=_allocation(tmp_path))
    assert result.returncode == 0, result.stderr
    first, second = _srun_lines(result.stdout)
    assert "--nodelist=mxbh1 " in first and " --gpus=1 " in first, first
    assert "--nodelist=mxbh2 " in second and " --gres=none " in second, second


@pytest.mark.parametrize("workers,show_job,words", [
    ("{count: 5, resources: {gpus: 1}}", SHOW_JOB,
     "GPUs (scontrol show job -d): mxbh1 2, mxbh2 2: the job's tasks ask for 5 GPUs in all "
     "but the hosts hold 4 (GPUs asked: 5 workers x 1; "),
    ("{count: 1, resources: {gpus: 3}}", SHOW_JOB,
     "worker[0] asks for 3 GPUs, but no host with a free slot has 3 GPUs left for it "
     "(left: mxbh1: 2, mxbh2: 2) (GPUs asked: 1 worker x 3; "),
    ("{count: 1, resources: {gpus: 1}}", SHOW_JOB.replace("gpu:2(IDX:0-1)", ""),
     "mxbh1 0, mxbh2 0: the job's tasks ask for 1 GPUs in all but the hosts hold 0"),
])
def test_too_few_gpus_in_the_allocation_exits_2_and_starts_nothing(cli, tmp_path, workers,
                                                                   show_job, words):
    spec = _spec(tmp_path, "", workers=workers)
    result = cli.run("submit", "--backend", "slurm", str(spec),
                     env=_allocation(tmp_path, show_job))
    assert result.returncode == 2, result.stderr
    assert "Slurm allocation 8 (SLURM_JOB_NODELIST=mxbh[1-2])" in result.stderr
    assert words in result.stderr, result.stderr
    assert "--gres=gpu:N (N a node)" in result.stderr
    assert "nothing was started" in result.stderr and "Traceback" not in result.stderr
    assert cli.run_dirs() == [] and not (cli.home / "jobs").exists()


def test_an_allocation_whose_gpus_cannot_be_read_exits_3(cli, tmp_path):
    spec = _spec(tmp_path, "", workers="{count: 1, resources: {gpus: 1}}")
    result = cli.run("submit", "--backend", "slurm", str(spec),
                     env=dict(_allocation(tmp_path), FAKE_SHOW_JOB=""))
    assert result.returncode == 3, result.stderr
    assert "scontrol show job -d 8 failed (needed to read the GPUs of the allocation): " \
           "scontrol: unexpected show job -d 8" in result.stderr, result.stderr
    assert cli.run_dirs() == []


def _spec(tmp_path: Path, extra: str = "", workers: str = "{count: 1}") -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(f"name: job\ncommand: [python3, {FAKEROLE}]\nworkdir: {tmp_path}\n"
                    f"roles: {{worker: {workers}, server: {{count: 1}}}}\n"
                    "rendezvous: {startup_timeout: 2m}\n" + extra)
    return path
