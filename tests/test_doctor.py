"""`mxbatch doctor`: checks as data, each failure with its fix; the probe job through the
real backend, which fails and says how to fix it when the nodes cannot see the run
directory (a private tmpfs in the doctor's own mount namespace)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mxbatch.cli.jsonout import SCHEMA
from mxbatch.doctor import checks as doctor
from mxbatch.doctor import runner
from mxbatch.doctor.checks import Outcome

from .conftest import Cli, assert_no_processes, cluster_env_file, cluster_environment, write_spec


def test_rendezvous_dir_open_to_others_fails_with_chmod(tmp_path):
    from mxbatch.spec import config as siteconfig

    runs = tmp_path / "runs"
    runs.mkdir(mode=0o755)
    runs.chmod(0o755)
    spec = siteconfig.job_from_mapping({"command": ["python3"], "rendezvous": {"dir": str(runs)}},
                                       base_dir=tmp_path, default_name="d")
    check = runner.rendezvous_check(spec)
    assert check.outcome is Outcome.FAIL and "mode 0755" in check.detail
    assert check.fix == f"chmod 700 {runs}"
    runs.chmod(0o700)
    assert runner.rendezvous_check(spec).ok
    fresh = siteconfig.job_from_mapping(
        {"command": ["python3"], "rendezvous": {"dir": str(tmp_path / "new" / "runs")}},
        base_dir=tmp_path, default_name="d")
    created = runner.rendezvous_check(fresh)
    assert created.ok and "(created)" in created.detail
    assert (tmp_path / "new" / "runs").stat().st_mode & 0o777 == 0o700


def test_helpers_say_what_failed_and_how_to_fix_it(tmp_path):
    missing = doctor.tool_check("no-such-tool-h13", "submits jobs", "install it")
    assert missing.outcome is Outcome.FAIL and missing.fix == "install it"
    failing = doctor.command_check("false answers", ["sh", "-c", "echo nope >&2; exit 3"],
                                   "start it")
    assert not failing.ok and "exited with 3: nope" in failing.detail
    slow = doctor.command_check("slow", ["sleep", "5"], "wait less", timeout=0.5)
    assert not slow.ok and "did not answer within 0.5s" in slow.detail
    runtime = doctor.container_check("no-such-runtime-h13", "image:tag")
    assert [c.ok for c in runtime] == [False] and "not installed" in runtime[0].detail
    text = runner.format_checks([doctor.passed("a", "fine"), failing,
                                 doctor.skipped("probe job", "not run")])
    assert "FAIL  false answers" in text and "fix: start it" in text
    assert text.endswith("1 of 3 checks failed\n")


@pytest.mark.skipif(shutil.which("ssh") is None, reason="no ssh client")
def test_ssh_check_in_batch_mode_fails_on_a_closed_port():
    check = doctor.ssh_check("127.0.0.1", ssh=("ssh", "-p", "1", "-F", "/dev/null"),
                             timeout=5)
    assert not check.ok and "ssh-copy-id" in check.fix


def _doctor(cli: Cli, *args: str, env=None) -> dict:
    result = cli.run("doctor", "--json", *args, env=env, timeout=300)
    assert result.returncode in (0, 1), result.stderr
    document = json.loads(result.stdout)
    assert document["schema"] == SCHEMA and document["ok"] is (result.returncode == 0)
    return document


def _by_name(document: dict) -> dict:
    return {check["name"]: check for check in document["checks"]}


@pytest.mark.mxnet
def test_doctor_local_passes_on_a_fresh_machine(cli):
    assert not cli.home.exists()
    document = _doctor(cli, "--backend", "local")
    assert document["ok"], document
    checks = _by_name(document)
    assert checks["probe job"]["outcome"] == "pass"
    assert "read the nonce" in checks["probe job"]["detail"]
    assert checks["mxnet on the nodes"]["outcome"] == "pass"
    assert (cli.home / "runs").stat().st_mode & 0o777 == 0o700
    assert not list((cli.home / "runs").glob("mxbatch-doctor-*[!0-9a-f]*"))  # probe dir gone


def test_probe_that_cannot_start_is_cancelled_at_its_deadline(cli, tmp_path):
    # every role's Python first sleeps (a sitecustomize, run after the role hook's):
    # the probe does not finish in time
    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text("import time\ntime.sleep(60)\n")
    spec = write_spec(tmp_path / "site.yaml", "command: python3\n"
                                              f"env: {{PYTHONPATH: '{slow}'}}\n")
    document = _doctor(cli, "--backend", "local", "--probe-timeout", "4", str(spec))
    probe = _by_name(document)["probe job"]
    assert probe["outcome"] == "fail" and not document["ok"]
    job = re.search(r"job (mxbatch-doctor-[0-9a-f]+)", probe["detail"]).group(1)
    assert "did not finish within 4s" in probe["detail"] or "startup deadline" in probe["detail"]
    assert probe["fix"]
    assert_no_processes(job)


def test_backend_failure_skips_the_probe_and_exits_1(cli, tmp_path):
    spec = write_spec(tmp_path / "site.yaml", "command: python3\n"
                                              "backends: {slurm: {submitter: drmaa}}\n")
    result = cli.run("doctor", "--backend", "slurm", str(spec),
                     env={"DRMAA_LIBRARY_PATH": ""})
    assert result.returncode == 1, result.stderr
    assert re.search(r"FAIL +Slurm client and submitter \(drmaa\) +submitter drmaa needs "
                     r"DRMAA_LIBRARY_PATH", result.stdout)
    assert re.search(r"SKIP +probe job +not run: fix the failures above first", result.stdout)
    assert "fix: " in result.stdout and "Traceback" not in result.stderr


def _can_unshare() -> bool:
    return (shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "-m", "--propagation", "private", "true"], capture_output=True)
        .returncode == 0)


def doctor_in_private_storage(cli: Cli, backend: str, tmp_path: Path) -> dict:
    """doctor with MXBATCH_HOME (so rendezvous.dir) on a tmpfs that only this process's
    mount namespace sees: the cluster's daemons find an empty directory there."""
    private = tmp_path / "private"
    private.mkdir()
    script = (f"mount -t tmpfs tmpfs {private} && exec {sys.executable} -m mxbatch doctor "
              f"--json --backend {backend} --probe-timeout 120")
    result = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                            capture_output=True, text=True, timeout=300,
                            env=dict(cli.env, MXBATCH_HOME=str(private / "home")))
    assert result.returncode == 1, result.stderr
    return json.loads(result.stdout)


def _assert_cluster_doctor(cli: Cli, backend: str, tmp_path: Path, queued) -> None:
    document = _doctor(cli, "--backend", backend)
    assert document["ok"], json.dumps(document, indent=1)
    checks = _by_name(document)
    assert checks["probe job"]["outcome"] == "pass"
    assert checks["mxnet on the nodes"]["outcome"] == "pass"
    if not _can_unshare():
        pytest.skip("unshare -m is not permitted here")
    hidden = doctor_in_private_storage(cli, backend, tmp_path)
    probe = _by_name(hidden)["probe job"]
    assert probe["outcome"] == "fail", hidden
    assert "cannot see the run directory" in probe["detail"]
    assert "put rendezvous.dir on storage every node mounts" in probe["fix"]
    job = re.search(r"job (mxbatch-doctor-[0-9a-f]+)", probe["detail"]).group(1)
    assert [line for line in queued() if job in line] == []


@pytest.mark.sge
def test_doctor_on_sge(home, tmp_path):
    cli = Cli(home, cluster_environment("sge"))

    def queued():
        return subprocess.run(["qstat", "-u", "*", "-r"], capture_output=True, text=True,
                              env=cli.env).stdout.splitlines()

    _assert_cluster_doctor(cli, "sge", tmp_path, queued)


@pytest.mark.slurm
def test_doctor_on_slurm(home, tmp_path):
    cli = Cli(home, cluster_environment("slurm"))

    def queued():
        return subprocess.run(["squeue", "--noheader", "-o", "%j"], capture_output=True,
                              text=True, env=cli.env).stdout.splitlines()

    _assert_cluster_doctor(cli, "slurm", tmp_path, queued)




@pytest.mark.skipif(not cluster_env_file("hosts").is_file(),
                    reason="the ssh test hosts are not up (ci/clusters/hosts-up.sh)")
def test_ssh_and_mpirun_checks_against_the_test_hosts():
    env = cluster_environment("hosts")
    ssh = ("ssh", "-F", env["MXBATCH_SSH_CONFIG"])
    good = env["MXBATCH_TEST_HOSTS"].split()[0]
    assert doctor.ssh_check(good, ssh=ssh).ok
    for bad in (env["MXBATCH_TEST_HOST_UNKNOWN_KEY"], env["MXBATCH_TEST_HOST_UNREACHABLE"]):
        check = doctor.ssh_check(bad, ssh=ssh, timeout=5)
        assert not check.ok and check.fix, check
    if shutil.which("mpirun"):
        assert doctor.mpirun_check().ok


@pytest.mark.mpi
def test_a_probe_job_the_backend_refuses_is_a_failed_check(home, tmp_path):
    """mpirun refusing root (no OMPI_ALLOW_RUN_AS_ROOT*): the probe check fails in
    mpirun's words with its fix; doctor exits 1, no traceback, nothing left."""
    env = {k: v for k, v in cluster_environment("hosts").items()
           if not k.startswith("OMPI_ALLOW_RUN_AS_ROOT")}
    cli = Cli(home, base_env=env)
    spec = write_spec(tmp_path / "site.yaml",
                      f"command: python3\nbackends: {{mpi: {{hostfile: "
                      f"{env['MXBATCH_TEST_HOSTFILE']}}}}}\n")
    document = _doctor(cli, "--backend", "mpi", str(spec))
    probe = _by_name(document)["probe job"]
    if probe["outcome"] == "pass":
        pytest.skip("not running as root")
    assert probe["outcome"] == "fail"
    assert "the probe job could not be submitted" in probe["detail"]
    assert "attempt to run as root" in probe["detail"] and probe["fix"]
    assert cli.run_dirs() == []
