"""Commands, arguments, environment values and role output that are no UTF-8, through
every backend (``runtime.osbytes``): a role started with ``caf\\xe9`` as its argument, an
inherited ``lat\\xe9in`` and a ``--env`` ``s\\xe9t`` prints them, and raw bytes, and the
job succeeds with those very bytes in its log, from the CLI's argv through plan.json,
the ssh channel, MPI's environment file, SGE's and Slurm's job scripts and environment
export, YARN's environment file; nothing prints a traceback on the way. docker and
podman take UTF-8 only (their configuration is JSON): a role in a container gets U+FFFD
for each byte that is no UTF-8, and its log says which values and arguments."""

from __future__ import annotations

import os
import re

import pytest

from .conftest import Cli, assert_no_processes, cluster_environment

#: what the role is given and prints
ARGUMENT = os.fsdecode(b"caf\xe9")
INHERITED = {"MXB_INHERITED": os.fsdecode(b"lat\xe9in")}
SET = os.fsdecode(b"MXB_SET=s\xe9t")
PRINTS = b"caf\xe9|lat\xe9in|s\xe9t\n"
RAW = b"\xff\xfe raw\n"
SCRIPT = 'printf "%s|%s|%s\\n" "$1" "$MXB_INHERITED" "$MXB_SET"; printf "\\377\\376 raw\\n"'
COMMAND = ["/bin/sh", "-c", SCRIPT, "sh", ARGUMENT]


#: what a role in a container prints: container runtimes take UTF-8 only
REPLACED = "caf\ufffd|lat\ufffdin|s\ufffdt\n".encode()


def _launch(cli: Cli, cwd, *flags: str, prints: bytes = PRINTS) -> str:
    """Launch the role through ``flags``' backend; the job id, once it succeeded and
    printed ``prints`` and the raw bytes, as its log says too."""
    result = cli.run_bytes("launch", "-n", "1", "-s", "1", "--grace", "2s", "--env", SET,
                           *flags, "--", *COMMAND, cwd=cwd, env=INHERITED, timeout=300)
    assert b"Traceback" not in result.stderr + result.stdout, result.stderr[-3000:]
    assert result.returncode == 0, result.stderr[-3000:]
    assert prints in result.stdout and RAW in result.stdout  # streamed as written
    job = result.stdout.split()[0].decode()
    assert re.fullmatch(r"launch-[0-9a-f]{8}", job), result.stdout[:200]
    logs = cli.run_bytes("logs", job, "--role", "worker", "--rank", "0", "--verbose")
    assert logs.returncode == 0, logs.stderr
    assert prints in logs.stdout and RAW in logs.stdout, logs.stdout[-2000:]
    # the supervisor's note quotes the command as given (to a container: as it got it)
    assert b" sh " + prints.split(b"|")[0] + b"\n" in logs.stdout
    return job


def test_local(cli, tmp_path):
    assert_no_processes(_launch(cli, tmp_path))


@pytest.mark.containers
@pytest.mark.parametrize("runtime", ["docker", "podman"])
def test_containers(home, tmp_path, runtime):
    env = cluster_environment("containers")
    mounts = [flag for mount in env["MXBATCH_TEST_CONTAINER_MOUNTS"].split(",")
              for flag in ("--mount", mount)]
    cli = Cli(home, env)
    job = _launch(cli, tmp_path, "--container", f"{runtime}:{env['MXBATCH_TEST_IMAGE']}",
                  *mounts, prints=REPLACED)
    log = cli.run_bytes("logs", job, "--role", "worker", "--rank", "0", "-v").stdout
    assert (f"not UTF-8, so given to the container with U+FFFD for each byte that is not "
            f"({runtime} takes UTF-8 only): MXB_INHERITED, MXB_SET, argument 4").encode() in log
    assert_no_processes(job)


@pytest.mark.parametrize("launcher", [pytest.param("ssh", marks=pytest.mark.ssh),
                                      pytest.param("mpi", marks=pytest.mark.mpi)])
def test_hosts(hosts_cli, hosts_env, tmp_path, launcher):
    job = _launch(hosts_cli, tmp_path, "--launcher", launcher, "-H",
                  hosts_env["MXBATCH_TEST_HOSTFILE"])
    assert_no_processes(job, timeout=15)


@pytest.mark.parametrize("cluster", [pytest.param("sge", marks=pytest.mark.sge),
                                     pytest.param("slurm", marks=pytest.mark.slurm)])
def test_batch(home, tmp_path, cluster):
    job = _launch(Cli(home, cluster_environment(cluster)), tmp_path, "--launcher", cluster)
    assert_no_processes(job, timeout=15)


@pytest.mark.yarn
def test_yarn(yarn, tmp_path):
    _launch(yarn, tmp_path, "--launcher", "yarn")
