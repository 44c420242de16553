"""The floor of bench/scale.py: what one trivial job of N tasks costs through each
backend's own tool, without mxbatch, so that mxbatch's start-up at N has something to be
compared with.

Local: N stand-in roles started by a plain loop of ``subprocess.Popen`` (seconds until
the last Popen returned, i.e. the child was exec'd; then they are killed). Elsewhere
every task is ``python -I -S -c pass`` (the interpreter the jobs run, on storage every
host sees) and the floor is the wall time from the tool's start until every task has
run and the job is gone:

  - ssh: one ``ssh HOST`` a host (all at once, as mxbatch opens its sessions), each
    running a Python loop that starts its share of the N tasks and waits for them;
  - mpi: one ``mpirun -n N`` over the hosts (``--map-by node --bind-to none``, as the
    backend runs it);
  - sge: one array job, ``qsub -sync y -t 1-N`` (qsub returns once every task ended);
  - slurm: one array job, ``sbatch --array=0-(N-1)``, then ``squeue`` every 0.1 s until
    it no longer lists the job;
  - slurm-alloc: ``salloc --nodes=K srun --overcommit --ntasks=N`` over the default
    partition's K nodes (one CPU each, shared by their tasks);
  - yarn: one skein application of N containers (64 MiB each, as the scale job's),
    submitted through a skein driver the floor starts (as ``mxbatch submit`` does without
    a global driver); ``floor_driver_s`` is the driver's start alone. The application
    ends once every container has.

Every function takes N, the backend's environment (its cluster's env file sourced) and
a scratch folder, and returns ``{"floor_s": ..., ...}``; it raises on any failure.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List

#: one trivial task, run by the interpreter the jobs run (the hosts share this file system)
TRIVIAL = [sys.executable, "-I", "-S", "-c", "pass"]
#: how long a floor job may take
TIMEOUT_S = 600
#: a host's share of the N tasks: started by a loop, then waited for (argv: K, command...)
HOST_LOOP = ("import subprocess, sys\n"
             "procs = [subprocess.Popen(sys.argv[2:]) for _ in range(int(sys.argv[1]))]\n"
             "sys.exit(max(p.wait() for p in procs))\n")
#: a skein application of N trivial containers, from the driver's start until it ended
YARN_APP = """\
import json, sys, time
import skein
n, command = int(sys.argv[1]), sys.argv[2]
t0 = time.time()
client = skein.Client(log=False)
t1 = time.time()
spec = skein.ApplicationSpec(
    name="scale-floor-%d" % n, max_attempts=1,
    master=skein.Master(resources=skein.Resources(memory=512, vcores=1)),
    services={"task": skein.Service(instances=n, max_restarts=0, script=command,
                                    resources=skein.Resources(memory=64, vcores=1))})
app = client.submit(spec)
while True:
    report = client.application_report(app)
    if str(report.state) in ("FINISHED", "FAILED", "KILLED"):
        break
    time.sleep(0.1)
t2 = time.time()
client.close()
print(json.dumps({"floor_s": t2 - t0, "floor_driver_s": t1 - t0,
                  "floor_final_status": str(report.final_status), "floor_app": app}))
"""


def deal(n: int, hosts: List[str]) -> Dict[str, int]:
    """N tasks dealt round-robin over the hosts (as mxbatch places them): host -> count."""
    counts = {host: 0 for host in hosts}
    for index in range(n):
        counts[hosts[index % len(hosts)]] += 1
    return counts


def hostfile_names(env: Dict[str, str]) -> List[str]:
    """The test hosts, by name, from the launch.py-style hostfile."""
    lines = Path(env["MXBATCH_TEST_HOSTFILE"]).read_text().splitlines()
    return [line.split()[0] for line in lines if line.strip() and not line.startswith("#")]


def _run(argv: List[str], env: Dict[str, str], what: str) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=TIMEOUT_S)
    if result.returncode != 0:
        raise RuntimeError(f"{what} exited {result.returncode}: "
                           f"{(result.stderr or result.stdout)[-1000:]}")
    return result


def floor_local(n: int, env: Dict[str, str], folder: Path, role_argv: List[str],
                counts: Dict[str, int]) -> dict:
    """N stand-ins started by a plain loop of ``subprocess.Popen``: seconds until the last
    Popen returned (the child exec'd), the loop's CPU; then all are killed."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = dict(os.environ, DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT=str(port))
    roles = ["scheduler"] + ["server"] * counts["server"] + ["worker"] * counts["worker"]
    procs: List[subprocess.Popen] = []
    cpu0 = os.times()
    t0 = time.time()
    try:
        for role in roles:
            procs.append(subprocess.Popen(role_argv, env=dict(base, DMLC_ROLE=role),
                                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))
        seconds = time.time() - t0
        cpu1 = os.times()
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()
    cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    return {"floor_s": seconds, "floor_cpu_s": cpu}


def floor_ssh(n: int, env: Dict[str, str], folder: Path) -> dict:
    ssh = ["ssh", "-F", env["MXBATCH_SSH_CONFIG"], "-o", "BatchMode=yes"]
    t0 = time.time()
    sessions = [subprocess.Popen(ssh + [host, shlex.join([sys.executable, "-c", HOST_LOOP,
                                                          str(k)] + TRIVIAL)],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, env=env)
                for host, k in deal(n, hostfile_names(env)).items() if k]
    failed = []
    for session in sessions:
        _, err = session.communicate(timeout=TIMEOUT_S)
        if session.returncode != 0:
            failed.append(f"ssh exited {session.returncode}: {err.decode()[-300:]}")
    if failed:
        raise RuntimeError("; ".join(failed))
    return {"floor_s": time.time() - t0}


def floor_mpi(n: int, env: Dict[str, str], folder: Path) -> dict:
    hostfile = folder / f"floor-hosts-{n}"
    hostfile.write_text("".join(f"{host} slots={k}\n"
                                for host, k in deal(n, hostfile_names(env)).items() if k))
    t0 = time.time()
    _run(["mpirun", "-n", str(n), "--hostfile", str(hostfile), "--map-by", "node",
          "--bind-to", "none", "--stdin", "none"] + TRIVIAL, env, "mpirun")
    return {"floor_s": time.time() - t0}


def floor_sge(n: int, env: Dict[str, str], folder: Path) -> dict:
    script = folder / "floor-task.sh"
    script.write_text("#!/bin/sh\nexec " + shlex.join(TRIVIAL) + "\n")
    t0 = time.time()
    _run(["qsub", "-sync", "y", "-t", f"1-{n}", "-N", f"scale-floor-{n}", "-o", "/dev/null",
          "-j", "y", "-S", "/bin/sh", "-wd", str(folder), str(script)], env, "qsub -sync y")
    return {"floor_s": time.time() - t0}


def floor_slurm(n: int, env: Dict[str, str], folder: Path) -> dict:
    t0 = time.time()
    job = _run(["sbatch", "--parsable", f"--array=0-{n - 1}", f"--job-name=scale-floor-{n}",
                "--output=/dev/null", f"--chdir={folder}", "--wrap",
                "exec " + shlex.join(TRIVIAL)], env, "sbatch").stdout.strip().split(";")[0]
    deadline = t0 + TIMEOUT_S
    while time.time() < deadline:
        listed = _run(["squeue", "-h", "-j", job, "-t", "PD,R,CG,CF,S", "-o", "%i"], env,
                      "squeue").stdout.strip()
        if not listed:
            return {"floor_s": time.time() - t0, "floor_job": job}
        time.sleep(0.1)
    subprocess.run(["scancel", job], env=env, capture_output=True, timeout=60)
    raise RuntimeError(f"the floor's array job {job} was still queued after {TIMEOUT_S} s")


def floor_yarn(n: int, env: Dict[str, str], folder: Path) -> dict:
    out = _run([sys.executable, "-c", YARN_APP, str(n), "exec " + shlex.join(TRIVIAL)], env,
               "the skein floor application").stdout
    result = json.loads(out.strip().splitlines()[-1])
    if result["floor_final_status"] not in ("SUCCEEDED", "FinalStatus.SUCCEEDED"):
        raise RuntimeError(f"the skein floor application ended {result}")
    return result


def floor_slurm_alloc(n: int, env: Dict[str, str], folder: Path) -> dict:
    nodes = subprocess.run(["sinfo", "-h", "-o", "%P %D"], capture_output=True, text=True,
                           env=env, timeout=30).stdout
    count = next(line.split()[1] for line in nodes.splitlines() if line.split()[0].endswith("*"))
    t0 = time.time()
    _run(["salloc", "--quiet", f"--nodes={count}", f"--job-name=scale-floor-{n}", "srun",
          "--overcommit", f"--ntasks={n}", "--distribution=cyclic", f"--chdir={folder}"]
         + TRIVIAL, env, "salloc srun")
    return {"floor_s": time.time() - t0}


FLOORS: Dict[str, Callable[[int, Dict[str, str], Path], dict]] = {
    "ssh": floor_ssh, "mpi": floor_mpi, "sge": floor_sge, "slurm": floor_slurm,
    "slurm-alloc": floor_slurm_alloc, "yarn": floor_yarn,
}
