"""Jobs inside an allocation the user holds, on the real test clusters: ``mxbatch launch
--backend slurm`` in ``salloc -N 3`` and in an ``sbatch`` script (one srun step a node),
``--backend sge`` in an SGE parallel job (``qsub -pe mpi N``, qrsh -inherit to each
host), and ``--launcher ssh`` given a PBS node file instead of -H. Each checks where
the roles ran (distinct node addresses), that nothing new was queued, and, after a
crash or a cancel, that the allocation is intact with nothing of the job left in it.
In ``salloc --gres=gpu:2`` (the test cluster's fake GPUs), workers that ask for a GPU
each get their own device of their node's step, and too many GPUs start nothing."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Sequence

import pytest

from .clusterjobs import sge_queued
from .conftest import (
    FAKEROLE,
    Cli,
    assert_no_processes,
    copy_example,
)
from .hostjobs import records
from .test_mxnet_local import assert_trained

MXBATCH = f"{sys.executable} -m mxbatch"


def task_hosts(cli: Cli, job: str) -> Dict[str, str]:
    """Each task's host (``worker-1`` -> ``mxbh2``), from its record."""
    return {name: record.get("host", "") for name, record in
            records(cli.run_dir(job)).items()}


def job_of(output: str) -> str:
    match = re.search(r"submitted (\S+) to ", output)
    assert match, output
    return match.group(1)


def script(tmp_path: Path, name: str, body: str, directives: str = "") -> Path:
    """A bash script: ``directives`` (``#SBATCH`` lines) right after the shebang."""
    path = tmp_path / name
    path.write_text("#!/bin/bash\n" + directives + "set -u\n" + body)
    path.chmod(0o755)
    return path


# --------------------------------------------------------------------------- Slurm


def salloc(cli: Cli, body: Path, nodes: int = 3, timeout: float = 600,
           options: Sequence[str] = ()) -> subprocess.CompletedProcess:
    return subprocess.run(["salloc", f"--nodes={nodes}", "--time=10", "--job-name=alloc-test",
                           *options, str(body)], capture_output=True, text=True, env=cli.env,
                          timeout=timeout)


def fields(text: str) -> Dict[str, str]:
    """``KEY=value`` lines a test script printed."""
    return dict(line.split("=", 1) for line in text.splitlines() if re.match(r"^[A-Z_]+=", line))


#: the script's report on the allocation after the job: its state, and the job's steps
#: still there after up to 30 s (a step whose srun was killed takes Slurm ~2 s to end)
AFTER = ('echo "ALLOCATION=$(squeue -h -j "$SLURM_JOB_ID" -o %T)"\n'
         'for i in $(seq 1 150); do\n'
         '    n=$(squeue -h -s -j "$SLURM_JOB_ID" -o %j | grep -c mxbatch- || true)\n'
         '    [ "$n" = 0 ] && break; sleep 0.2\n'
         'done\n'
         'echo "STEPS=$n"\n')


@pytest.mark.slurm
@pytest.mark.mxnet
def test_example_job_trains_inside_salloc_with_steps_on_the_nodes(slurm, tmp_path):
    """salloc -N 3 mxbatch launch --backend slurm -n 2 -s 2 -- python3 train_mlp.py: it
    trains, its roles run on 3 node addresses, squeue shows no job of it (steps only),
    and the allocation outlives it with no step left."""
    workdir = copy_example(tmp_path / "work").parent
    body = script(tmp_path, "in-salloc.sh", f"""cd {workdir}
export EPOCHS=2 LAUNCH_T0=$(date +%s.%N)
{MXBATCH} launch --backend slurm --name alloc-mlp -n 2 -s 2 --grace 5s -- \\
    python3 train_mlp.py --kvstore dist_sync > out.txt 2> err.txt &
launcher=$!
queued=0
while kill -0 $launcher 2>/dev/null; do
    queued=$(( queued + $(squeue -h -o %j | grep -c alloc-mlp || true) ))
    sleep 0.5
done
wait $launcher
echo "RC=$?"
echo "QUEUED=$queued"
{AFTER}""")
    result = salloc(slurm, body)
    assert result.returncode == 0, result.stderr
    said = fields(result.stdout)
    out, err = (workdir / "out.txt").read_text(), (workdir / "err.txt").read_text()
    assert said["RC"] == "0", err[-3000:]
    assert_trained(out)
    assert said["QUEUED"] == "0"  # no job of its own: steps of the allocation
    assert said["ALLOCATION"] == "RUNNING" and said["STEPS"] == "0"
    job = job_of(err)
    hosts = task_hosts(slurm, job)
    assert len(set(hosts.values())) == 3, hosts
    assert hosts["scheduler-0"] == "mxbh1"  # the first node of the allocation
    assert_no_processes(job)


@pytest.mark.slurm
@pytest.mark.mxnet
def test_the_example_job_trains_in_an_sbatch_script_that_calls_mxbatch_launch(slurm,
                                                                             tmp_path):
    """An sbatch script (2 nodes) whose body is ``mxbatch launch --backend slurm ...
    python3 train_mlp.py``: it trains, with roles on both nodes, as steps of that job."""
    workdir = copy_example(tmp_path / "work").parent
    body = script(tmp_path, "job.sh", f"""cd {workdir}
EPOCHS=2 {MXBATCH} launch --backend slurm --name alloc-batch -n 2 -s 1 --grace 5s -- \\
    python3 train_mlp.py --kvstore dist_sync > out.txt
echo "RC=$?"
""", directives="#SBATCH --nodes=2\n")
    out = tmp_path / "batch.out"
    result = subprocess.run(["sbatch", "--wait", "--time=10", f"--output={out}", str(body)],
                            capture_output=True, text=True, env=slurm.env, timeout=600)
    assert result.returncode == 0, result.stderr + out.read_text()
    text = out.read_text()
    assert "RC=0" in text, text
    assert_trained((workdir / "out.txt").read_text())
    job = job_of(text)
    hosts = task_hosts(slurm, job)
    assert len(set(hosts.values())) == 2, hosts
    assert slurm.status(job)["state"] == "SUCCEEDED"
    assert_no_processes(job)


@pytest.mark.slurm
def test_a_crash_or_a_cancel_ends_the_steps_never_the_allocation(slurm, tmp_path):
    """In one salloc: a job whose worker raises fails (exit 1, the reason names it), then
    a detached job is cancelled; after each, the allocation runs on with no step of the
    job and no process of it left."""
    (tmp_path / "out").mkdir()
    env = (f"FAKE_OUT={tmp_path}/out FAKE_TICK=0.5 FAKE_SLEEP=600 FAKE_RAISE_RANK=1 "
           f"FAKE_RAISE_ON={tmp_path}/raise")
    body = script(tmp_path, "in-salloc.sh", f"""cd {tmp_path}
touch {tmp_path}/raise
{env} {MXBATCH} launch --backend slurm --name alloc-crash -n 2 -s 1 --grace 2s -- \\
    python3 {FAKEROLE} > crash.out 2> crash.err
echo "CRASH_RC=$?"
{AFTER.replace('ALLOCATION=', 'CRASH_ALLOCATION=').replace('STEPS=', 'CRASH_STEPS=')}
rm {tmp_path}/raise
job=$({env} {MXBATCH} launch --backend slurm --name alloc-cancel --detach -n 2 -s 1 \\
    --grace 2s -- python3 {FAKEROLE} 2> detach.err)
echo "DETACHED=$job"
for i in $(seq 1 600); do
    [ "$(ls {tmp_path}/out | wc -l)" -ge 2 ] && break   # both workers run
    sleep 0.2
done
echo "RUNNING_STEPS=$(squeue -h -s -j "$SLURM_JOB_ID" -o %j | grep -c "mxbatch-$job" || true)"
{MXBATCH} cancel "$job" 2> cancel.err
echo "CANCEL_RC=$?"
{AFTER}""")
    result = salloc(slurm, body)
    assert result.returncode == 0, result.stderr
    said = fields(result.stdout)
    crash_err = (tmp_path / "crash.err").read_text()
    assert said["CRASH_RC"] == "1", crash_err[-3000:]
    assert re.search(r"FAILED: worker\[1\] exited with code 1", crash_err), crash_err[-3000:]
    assert said["CRASH_ALLOCATION"] == "RUNNING" and said["CRASH_STEPS"] == "0"
    assert_no_processes(job_of(crash_err))
    cancelled = said["DETACHED"]
    assert said["RUNNING_STEPS"] == "3", said  # 4 tasks over the 3 nodes: a step each
    assert said["CANCEL_RC"] == "0", (tmp_path / "cancel.err").read_text()
    assert said["ALLOCATION"] == "RUNNING" and said["STEPS"] == "0"
    assert slurm.status(cancelled)["state"] == "CANCELLED"
    assert_no_processes(cancelled)


@pytest.mark.slurm
def test_a_step_killed_fails_the_job_naming_its_node(slurm, tmp_path):
    """SIGKILL of the srun that holds one node's step: the job fails naming that node,
    the other nodes' roles stop, and the allocation runs on without a step of the job."""
    (tmp_path / "out").mkdir()
    body = script(tmp_path, "in-salloc.sh", f"""cd {tmp_path}
job=$(FAKE_OUT={tmp_path}/out FAKE_TICK=0.5 FAKE_SLEEP=600 {MXBATCH} launch --backend slurm \
    --name alloc-kill --detach -n 2 -s 1 --grace 2s -- python3 {FAKEROLE} 2> detach.err)
for i in $(seq 1 600); do
    [ "$(ls {tmp_path}/out | wc -l)" -ge 2 ] && break   # both workers run
    sleep 0.2
done
pkill -KILL -f -- "--nodelist=mxbh2 --job-name=mxbatch-$job "
{MXBATCH} wait "$job" --timeout 120 2> wait.err
echo "WAIT_RC=$?"
echo "JOB=$job"
{AFTER}""")
    result = salloc(slurm, body)
    assert result.returncode == 0, result.stderr
    said = fields(result.stdout)
    wait_err = (tmp_path / "wait.err").read_text()
    assert said["WAIT_RC"] == "1", wait_err
    assert "host mxbh2: the srun step to its agent was lost (srun exited with -9" in wait_err
    assert said["ALLOCATION"] == "RUNNING" and said["STEPS"] == "0"
    assert slurm.status(said["JOB"])["state"] == "FAILED"
    assert_no_processes(said["JOB"])


#: what each stand-in role of ``gpu_spec`` prints: its node, its CUDA_VISIBLE_DEVICES and
#: the GPUs Slurm gave its step (a line of its own: the supervisor's note quotes the
#: command)
GPU_REPORT = re.compile(r"^GPU_REPORT host=(\S+) cuda=\[([^]]*)\] step=\[([^]]*)\]$",
                        re.MULTILINE)


def gpu_spec(tmp_path: Path, name: str, workers: int) -> Path:
    """1 scheduler, 1 server and ``workers`` workers of 1 GPU each: stand-in roles
    (``fakerole.py``: the workers end after a second) that first print what they were
    given (``GPU_REPORT``)."""
    report = ('echo "GPU_REPORT host=$(hostname) cuda=[${CUDA_VISIBLE_DEVICES-unset}] '
              f'step=[${{SLURM_STEP_GPUS-unset}}]"; exec python3 {FAKEROLE}')
    spec = {"name": name, "command": ["sh", "-c", report], "workdir": str(tmp_path),
            "env": {"FAKE_SLEEP": "1"},
            "resources": {"cpus": 1, "memory": "256M", "walltime": "10m"},
            "roles": {"server": {"count": 1},
                      "worker": {"count": workers, "resources": {"gpus": 1}}},
            "rendezvous": {"startup_timeout": "3m", "grace": "2s"}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(json.dumps(spec, indent=1))
    return path


def gpu_reports(cli: Cli, job: str) -> Dict[str, tuple]:
    """Each task's (host, CUDA_VISIBLE_DEVICES, step's GPUs), from its log."""
    run_dir = cli.run_dir(job)
    found = {}
    for name in records(run_dir):
        text = (run_dir / "logs" / f"{name}.log").read_text(errors="replace")
        match = GPU_REPORT.search(text)
        assert match, (name, text[-2000:])
        found[name] = match.groups()
    return found


@pytest.mark.slurm
def test_gpu_workers_get_their_own_devices_of_their_nodes_step(slurm, tmp_path):
    """salloc -N 2 --gres=gpu:2: 4 workers of 1 GPU go 2 to a node, each node's step asks
    for 2 GPUs (render shows it, and Slurm gave the step 0,1), each worker sees one of
    them, the two on a node different ones, the scheduler and server none. Then 5 such
    workers: exit 2 naming the GPUs, no run directory, no step, nothing left."""
    gpu_spec(tmp_path, "alloc-gpus", 4)
    gpu_spec(tmp_path, "alloc-gpus-5", 5)
    body = script(tmp_path, "in-salloc.sh", f"""cd {tmp_path}
{MXBATCH} render --backend slurm alloc-gpus.yaml > render.txt 2> render.err
echo "RENDER_RC=$?"
{MXBATCH} submit --backend slurm --wait alloc-gpus.yaml > gpus.out 2> gpus.err
echo "RC=$?"
{MXBATCH} submit --backend slurm --wait alloc-gpus-5.yaml > toomany.out 2> toomany.err
echo "TOOMANY_RC=$?"
{AFTER}""")
    result = salloc(slurm, body, nodes=2, options=["--gres=gpu:2"])
    assert result.returncode == 0, result.stderr
    said = fields(result.stdout)
    assert said["RENDER_RC"] == "0", (tmp_path / "render.err").read_text()
    steps = [line for line in (tmp_path / "render.txt").read_text().splitlines()
             if line.startswith("srun: ")]
    assert len(steps) == 2 and all(" --gpus=2 " in line for line in steps), steps
    err = (tmp_path / "gpus.err").read_text()
    assert said["RC"] == "0", err[-3000:]
    job = job_of(err)
    reports = gpu_reports(slurm, job)
    assert sorted(reports) == ["scheduler-0", "server-0"] + [f"worker-{i}" for i in range(4)]
    assert reports["scheduler-0"][1] == "" and reports["server-0"][1] == "", reports
    by_node: Dict[str, List[str]] = {}
    for name, (host, cuda, step) in reports.items():
        assert step == "0,1", reports  # every node's step holds the node's 2 GPUs
        if name.startswith("worker-"):
            assert cuda in ("0", "1"), reports  # one device, of its step's
            by_node.setdefault(host, []).append(cuda)
    assert sorted(by_node) == ["mxbh1", "mxbh2"], reports
    assert all(sorted(cudas) == ["0", "1"] for cudas in by_node.values()), reports
    assert slurm.status(job)["state"] == "SUCCEEDED"
    assert_no_processes(job)
    # too many: nothing starts
    toomany = (tmp_path / "toomany.err").read_text()
    assert said["TOOMANY_RC"] == "2", toomany
    assert "GPUs (scontrol show job -d): mxbh1 2, mxbh2 2: the job's tasks ask for 5 GPUs in " \
           "all but the hosts hold 4 (GPUs asked: 5 workers x 1; " in toomany, toomany
    assert "nothing was started" in toomany, toomany
    assert "Traceback" not in toomany
    assert said["ALLOCATION"] == "RUNNING" and said["STEPS"] == "0"
    assert [d.name for d in slurm.run_dirs()] == [job]


@pytest.mark.slurm
def test_gpus_asked_for_the_job_place_the_workers_by_each_nodes_share(slurm, tmp_path):
    """salloc -N 2 --gpus=3 gives one node 2 GPUs and the other 1 (and puts SLURM_GPUS=3
    in the environment, which srun would add to every step): 3 workers of 1 GPU go 2
    and 1, each with a device of its own."""
    gpu_spec(tmp_path, "alloc-gpus-job", 3)
    body = script(tmp_path, "in-salloc.sh", f"""cd {tmp_path}
{MXBATCH} submit --backend slurm --wait alloc-gpus-job.yaml > gpus.out 2> gpus.err
echo "RC=$?"
echo "HELD=$(scontrol show job -d "$SLURM_JOB_ID" | grep -o 'Nodes=[^ ]* .*GRES=[^ ]*' \
    | sed 's/ .*GRES=gpu:/:/; s/(.*//; s/Nodes=//' | tr '\n' ' ')"
{AFTER}""")
    result = salloc(slurm, body, nodes=2, options=["--gpus=3"])
    assert result.returncode == 0, result.stderr
    said = fields(result.stdout)
    err = (tmp_path / "gpus.err").read_text()
    assert said["RC"] == "0", err[-3000:]
    held = dict(item.split(":") for item in said["HELD"].split())
    assert sorted(held.values()) == ["1", "2"], said
    by_node: Dict[str, List[str]] = {}
    for name, (host, cuda, _step) in gpu_reports(slurm, job_of(err)).items():
        if name.startswith("worker-"):
            by_node.setdefault(host, []).append(cuda)
    assert {node: len(cudas) for node, cudas in by_node.items()} == \
        {node: int(n) for node, n in held.items()}, (by_node, held)
    assert all(sorted(cudas) == [str(i) for i in range(len(cudas))]
               for cudas in by_node.values()), by_node
    assert said["STEPS"] == "0"
    assert_no_processes(job_of(err))


# ----------------------------------------------------------------------------- SGE


def qsub_pe(cli: Cli, tmp_path: Path, body: str, slots: int, timeout: float = 600
            ) -> str:
    """Run ``body`` as an SGE parallel job of ``slots`` slots in PE mpi (qsub -sync y);
    its output."""
    job_script = script(tmp_path, "pe-job.sh", f"export PATH={Path(sys.executable).parent}:$PATH\n"
                        f"cd {tmp_path}\n" + body)
    out = tmp_path / "pe-job.out"
    pe = cli.env.get("MXBATCH_SGE_GANG_PE", "mpi")
    result = subprocess.run(["qsub", "-sync", "y", "-V", "-j", "y", "-o", str(out),
                             "-N", "alloc-pe", "-pe", pe, str(slots), str(job_script)],
                            capture_output=True, text=True, env=cli.env, timeout=timeout)
    assert result.returncode == 0, result.stdout + result.stderr + out.read_text()
    return out.read_text()


@pytest.mark.sge
@pytest.mark.mxnet
def test_example_job_trains_inside_an_sge_parallel_job(sge, tmp_path):
    """qsub -pe mpi 5 with mxbatch launch --backend sge in the job script: one agent a
    host through qrsh -inherit, the roles on every host SGE granted."""
    workdir = copy_example(tmp_path / "work").parent
    text = qsub_pe(sge, tmp_path, f"""cd {workdir}
EPOCHS=2 {MXBATCH} launch --backend sge --name alloc-sge -n 2 -s 2 --grace 5s -- \\
    python3 train_mlp.py --kvstore dist_sync
echo "RC=$?"
""", slots=5)
    assert "RC=0" in text, text[-3000:]
    assert_trained(text)
    job = job_of(text)
    hosts = task_hosts(sge, job)
    assert len(set(hosts.values())) >= 2, hosts
    assert not sge_queued(sge, job)  # no job of its own: tasks of the parallel job
    assert_no_processes(job)


@pytest.mark.sge
def test_a_crash_inside_an_sge_parallel_job_leaves_nothing_on_any_host(sge, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "raise").touch()
    text = qsub_pe(sge, tmp_path, f"""FAKE_OUT={tmp_path}/out FAKE_TICK=0.5 FAKE_SLEEP=600 \\
FAKE_RAISE_RANK=1 FAKE_RAISE_ON={tmp_path}/raise {MXBATCH} launch --backend sge \\
    --name alloc-sge-crash -n 2 -s 1 --grace 2s -- python3 {FAKEROLE}
echo "RC=$?"
""", slots=4)
    assert "RC=1" in text, text[-3000:]
    assert re.search(r"FAILED: worker\[1\] exited with code 1", text), text[-3000:]
    job = job_of(text)
    assert len(set(task_hosts(sge, job).values())) == 4
    assert_no_processes(job)


@pytest.mark.sge
def test_a_pe_job_with_too_few_slots_starts_nothing(sge, tmp_path):
    text = qsub_pe(sge, tmp_path, f"""{MXBATCH} launch --backend sge -n 2 -s 1 -- true
echo "RC=$?"
""", slots=2)
    assert "RC=2" in text, text
    assert "the job has 4 tasks but the hosts offer 2 slots granted" in text
    assert sge.run_dirs() == []


# ----------------------------------------------------------------------- PBS node file


@pytest.mark.ssh
def test_launcher_ssh_takes_the_pbs_node_file_without_hosts(hosts_cli, hosts_env, tmp_path):
    names: List[str] = hosts_env["MXBATCH_TEST_HOST_NAMES"].split()
    nodes = tmp_path / "nodefile"
    nodes.write_text("".join(f"{n}\n{n}\n" for n in names))  # 2 slots a host
    (tmp_path / "out").mkdir()
    result = hosts_cli.run("launch", "--launcher", "ssh", "--name", "pbs", "-n", "2", "-s",
                           "2", "--grace", "2s", "--", "python3", str(FAKEROLE),
                           env={"PBS_NODEFILE": str(nodes), "FAKE_SLEEP": "2",
                                "FAKE_OUT": str(tmp_path / "out")}, cwd=tmp_path,
                           timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    job = job_of(result.stderr)
    hosts = task_hosts(hosts_cli, job)
    assert sorted(set(hosts.values())) == sorted(names), hosts  # 5 tasks over 4 hosts
    assert_no_processes(job)
