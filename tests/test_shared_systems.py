"""Shared systems (issue 34, section 1): another Unix user, created by this module
(``mxbatch-other``), attacks the rendezvous folder for real (``sharedattack.py``: watch
the folder, rename a new run directory aside, put its own in its place, plant its own
``runtime.pyz``). A folder that user can write (0777, or 1777 owned by that user) is
refused before anything is created, on local and on Slurm; a root-owned 1777 scratch
folder works, and the attack on it fails. Also: the site's ``trust_shared``, doctor's
words, a umask of 000, and a cached runtime archive another user could have written."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Dict, Iterator, List

import pytest

from mxbatch.backends import bundle
from mxbatch.runtime import trust

from .clusterjobs import fake_spec, run_dir_of
from .conftest import Cli, cluster_env_file, cluster_environment, write_spec

OTHER = "mxbatch-other"
ATTACK = Path(__file__).with_name("sharedattack.py")
#: the folder kinds of the issue and whether a submission may use them
CASES = {"0777": False, "1777-other": False, "1777-root": True}


@pytest.fixture(scope="module")
def other() -> Dict[str, int]:
    """The second Unix user (made once, idempotently): its uid and gid."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the test makes a second user and runs code as it")
    if subprocess.run(["id", "-u", OTHER], capture_output=True).returncode != 0:
        made = subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                               "/usr/sbin/nologin", OTHER], capture_output=True, text=True)
        if made.returncode not in (0, 9):  # 9: made in the meantime
            pytest.fail(f"useradd {OTHER}: {made.stderr}")
    import pwd

    entry = pwd.getpwnam(OTHER)
    return {"uid": entry.pw_uid, "gid": entry.pw_gid}


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A folder under /tmp the other user can reach (root's 0755; the test's own
    tmp_path is behind root's 0700 pytest folder); seen by the Slurm nodes too."""
    base = Path(tempfile.mkdtemp(prefix="mxbatch-shared-", dir="/tmp"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def shared_folder(base: Path, case: str, other: Dict[str, int]) -> Path:
    folder = base / f"rdv-{case}"
    folder.mkdir()
    if case == "0777":
        folder.chmod(0o777)
    else:
        folder.chmod(0o1777)
        if case == "1777-other":
            os.chown(folder, other["uid"], other["gid"])
    return folder


class Attacker:
    """``sharedattack.py`` as the other user, against ``folder``."""

    def __init__(self, base: Path, folder: Path, prefix: str, other: Dict[str, int]) -> None:
        self.out = base / "attacker"
        self.out.mkdir(exist_ok=True)
        self.out.chmod(0o777)
        self.marker = self.out / "pwned"
        self.report = self.out / "report.jsonl"
        self.proc = subprocess.Popen(
            ["setpriv", f"--reuid={other['uid']}", f"--regid={other['gid']}",
             "--clear-groups", "/usr/bin/python3", str(ATTACK), str(folder), prefix,
             str(self.marker), str(self.report), "300"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def stop(self) -> List[dict]:
        """Stop it; the steps it reported."""
        self.proc.terminate()
        _, err = self.proc.communicate(timeout=10)
        assert self.proc.returncode in (0, -15), err
        if not self.report.exists():
            return []
        return [json.loads(line) for line in self.report.read_text().splitlines()]


def assert_refused(result: subprocess.CompletedProcess, folder: Path, case: str,
                   home: Path) -> None:
    """Exit 2 naming the folder, its owner and mode and what to do; nothing made."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    owner = OTHER if case == "1777-other" else "root"
    mode = "0777" if case == "0777" else "1777"
    assert f"{folder} (owner {owner}, mode {mode})" in result.stderr, result.stderr
    assert "rendezvous.dir" in result.stderr and "folder of your own" in result.stderr
    assert "trust_shared" in result.stderr
    assert list(folder.iterdir()) == []
    assert not (home / "jobs").is_dir() or list((home / "jobs").iterdir()) == []


def run_attacked(cli: Cli, base: Path, case: str, other: Dict[str, int], backend: str,
                 tmp_path: Path) -> None:
    """Submit a stand-in job to ``backend`` in a ``case`` folder while the other user
    attacks it: refused with nothing made, or (root-owned 1777) run to success with
    the attack refused at the rename and at the plant."""
    folder = shared_folder(base, case, other)
    name = f"shared-{backend}-{case}"
    spec = fake_spec(tmp_path, backend, "", name=name, runs=folder, workers=1,
                     env={"FAKE_SLEEP": "1"})
    render = cli.run("render", str(spec), "--backend", backend)
    attacker = Attacker(base, folder, name, other)
    try:
        if not CASES[case]:
            assert render.returncode == 2, render.stdout
            result = cli.run("submit", str(spec), "--backend", backend, "--wait")
            assert_refused(result, folder, case, cli.home)
            steps = attacker.stop()
            assert steps == []
        else:
            assert render.returncode == 0, render.stderr
            job = cli.submit(spec, "--backend", backend)
            waited = cli.run("wait", job, "--timeout", "180")
            steps = attacker.stop()
            assert waited.returncode == 0, (waited.stdout, waited.stderr, steps)
            run_dir = run_dir_of(cli, job)
            assert run_dir.parent == folder
            assert trust.run_dir_problem(os.lstat(run_dir)) is None
            kinds = [step["step"] for step in steps if step["name"] == job]
            assert kinds[:3] == ["seen", "rename refused", "plant refused"], steps
            assert "renamed" not in kinds and "planted" not in kinds
    finally:
        if attacker.proc.poll() is None:
            attacker.stop()
    assert not attacker.marker.exists(), "the other user's runtime.pyz ran"


@pytest.mark.parametrize("case", list(CASES))
def test_local_shared_folder_attack(cli, other, scratch, case, tmp_path):
    run_attacked(cli, scratch, case, other, "local", tmp_path)


@pytest.mark.slurm
@pytest.mark.skipif(not cluster_env_file("slurm").is_file() and
                    not os.environ.get("MXBATCH_REQUIRE"),
                    reason="the Slurm test cluster is not up")
@pytest.mark.parametrize("case", list(CASES))
def test_slurm_shared_folder_attack(home, other, scratch, case, tmp_path):
    slurm = Cli(home, cluster_environment("slurm"))
    run_attacked(slurm, scratch, case, other, "slurm", tmp_path)


def test_a_folder_above_is_checked_too(cli, other, scratch, tmp_path):
    """A folder of the user's own (0700) under one the other user can write: refused,
    naming the folder above; a rendezvous dir still to be made there likewise."""
    above = shared_folder(scratch, "0777", other)
    mine = above / "mine"
    mine.mkdir(mode=0o700)
    for runs in (mine, above / "new" / "runs"):
        spec = fake_spec(tmp_path, "local", "", name="above", runs=runs, workers=1)
        result = cli.run("submit", str(spec), "--backend", "local")
        assert result.returncode == 2 and f"{above} (owner root, mode 0777)" in result.stderr
    assert not (above / "new").exists()


def test_a_symlink_through_a_shared_folder_is_followed(cli, other, scratch, tmp_path):
    """A rendezvous dir reached through a symlink into a folder the other user can
    write: the folder the link leads through is refused."""
    shared = shared_folder(scratch, "0777", other)
    (shared / "runs").mkdir(mode=0o700)
    private = scratch / "private"
    private.mkdir(mode=0o700)
    (private / "link").symlink_to(shared / "runs")
    assert trust.untrusted_folder(str(private / "link")).path == str(shared)


def test_the_site_may_trust_its_shared_storage(cli, other, scratch, tmp_path):
    """``rendezvous.trust_shared: true`` in the site config: accepted, doctor warns; in
    a job spec it is an error at its line (a job cannot vouch for a site)."""
    folder = shared_folder(scratch, "0777", other)
    config = write_spec(tmp_path / "config.yaml",
                        "defaults:\n  rendezvous: {trust_shared: true}\n")
    spec = fake_spec(tmp_path, "local", "", name="trusted", runs=folder, workers=1,
                     env={"FAKE_SLEEP": "0"})
    env = {"MXBATCH_CONFIG": str(config)}
    result = cli.run("submit", str(spec), "--backend", "local", "--wait", env=env)
    assert result.returncode == 0, result.stderr
    doctor = cli.run("doctor", str(spec), "--backend", "local", "--no-probe", "--json", env=env)
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    check = checks["rendezvous directory"]
    assert check["outcome"] == "warn" and "trust_shared" in check["detail"], check
    in_spec = json.loads(spec.read_text())
    in_spec["rendezvous"]["trust_shared"] = True
    spec.write_text(json.dumps(in_spec, indent=1))
    refused = cli.run("render", str(spec), "--backend", "local")
    assert refused.returncode == 2
    assert "rendezvous.trust_shared: only the site config may set this key" in refused.stderr


def test_doctor_names_the_sticky_mode_and_owner(cli, other, scratch, tmp_path):
    folder = shared_folder(scratch, "1777-other", other)
    spec = fake_spec(tmp_path, "local", "", name="doc", runs=folder, workers=1)
    doctor = cli.run("doctor", str(spec), "--backend", "local", "--no-probe", "--json")
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    check = checks["rendezvous directory"]
    assert check["outcome"] == "fail", check
    assert f"(owner {OTHER}, mode 1777)" in check["detail"], check
    root_sticky = shared_folder(scratch, "1777-root", other)
    spec = fake_spec(tmp_path, "local", "", name="doc", runs=root_sticky, workers=1)
    doctor = cli.run("doctor", str(spec), "--backend", "local", "--no-probe", "--json")
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["rendezvous directory"]["outcome"] == "pass", checks


def test_umask_000_leaves_nothing_open(tmp_path):
    """With a umask of 000 the home, its job records, its cache and a run directory's
    folders are made 0700."""
    home = tmp_path / "deep" / "home"
    spec = fake_spec(tmp_path, "local", "", name="umask", workers=1,
                     env={"FAKE_SLEEP": "0"})
    cli = Cli(home)
    result = subprocess.run(
        ["sh", "-c", 'umask 000 && exec "$@"', "sh", cli_python(), "-m", "mxbatch",
         "submit", str(spec), "--backend", "local"],  # detached: it ships the runtime
        env=dict(cli.env, MXBATCH_CONFIG=""), capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    job = result.stdout.strip().splitlines()[-1]
    waited = cli.run("wait", job, "--timeout", "120", env={"MXBATCH_CONFIG": ""})
    assert waited.returncode == 0, waited.stderr
    for path in (tmp_path / "deep", home, home / "jobs", home / "cache",
                 home / "cache" / "runtime", home / "runs"):
        assert path.stat().st_mode & 0o777 == 0o700, path


def cli_python() -> str:
    import sys

    return sys.executable


def test_a_cached_archive_another_user_wrote_is_not_used(tmp_path, other):
    """The runtime archive cached in $MXBATCH_HOME/cache: one another user owns, or
    one in a folder others can write, or a symlink, is built again, never copied into
    a run directory."""
    members = bundle.runtime_members()
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    good = bundle.cached_archive(members, cache)
    (path,) = cache.glob("runtime-*.pyz")
    path.write_bytes(b"planted")
    os.chown(path, other["uid"], other["gid"])
    assert bundle.cached_archive(members, cache) == good
    path.write_bytes(b"planted")
    os.chown(path, 0, 0)
    cache.chmod(0o777)
    assert bundle.cached_archive(members, cache) == good
    cache.chmod(0o700)
    path.unlink()
    planted = tmp_path / "planted.pyz"
    planted.write_bytes(b"planted")
    path.symlink_to(planted)
    assert bundle.cached_archive(members, cache) == good


# --------------------------------------------------------------------------- bad input
# (issue 34, section 4)


def strict_json(text: str):
    """``text`` parsed as RFC 8259 JSON: NaN and the infinities are no JSON."""
    def refuse(constant: str):
        raise ValueError(f"not JSON: {constant}")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("where", ["env", "argv"])
def test_a_nul_in_an_env_value_or_a_word_is_a_spec_error(cli, tmp_path, where):
    spec = fake_spec(tmp_path, "local", "", name="nul", workers=1)
    data = json.loads(spec.read_text())
    if where == "env":
        data["env"]["X"] = "a\u0000b"
    else:
        data["roles"]["worker"]["command"] = ["python3", "a\u0000b"]
    spec.write_text(json.dumps(data, indent=1))
    key = "env: X: the value" if where == "env" else "roles.worker.command: word [1]"
    for args in (("render",), ("submit", "--wait")):
        result = cli.run(*args, str(spec), "--backend", "local")
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert "nul.yaml:" in result.stderr and key in result.stderr, result.stderr
        assert "NUL character" in result.stderr and "submitted" not in result.stderr
    assert cli.run_dirs() == []
    assert not (cli.home / "jobs").is_dir() or list((cli.home / "jobs").iterdir()) == []


def test_the_smallest_heartbeat_timeout_is_named(cli, tmp_path):
    spec = fake_spec(tmp_path, "local", "", name="beat", workers=1)
    data = json.loads(spec.read_text())
    data["rendezvous"]["heartbeat_timeout"] = "1ms"
    spec.write_text(json.dumps(data, indent=1))
    result = cli.run("render", str(spec), "--backend", "local")
    assert result.returncode == 2
    assert "rendezvous.heartbeat_timeout: must be at least 3s, got '1ms'" in result.stderr


def test_json_documents_are_strict_json(cli, tmp_path):
    """A role that prints ``Speed: 1e400 samples/sec``: no speed (no JSON number can
    say it); every ``--json`` document stays RFC 8259 JSON."""
    from mxbatch.cli import jsonout
    from mxbatch.runtime import metrics

    assert metrics.parse_line(b"Epoch[0] Batch [20]\tSpeed: 1e400 samples/sec") == {}
    assert strict_json(jsonout.dumps({"a": float("inf"), "b": [float("nan")]})) == \
        {"a": None, "b": [None]}
    spec = fake_spec(tmp_path, "local", "", name="inf", workers=1,
                     env={"FAKE_SLEEP": "2", "FAKE_TICK": "0.2", "FAKE_SPEED": "1e400"})
    job = cli.submit(spec, "--backend", "local")
    assert cli.run("wait", job, "--timeout", "60").returncode == 0
    for command in (("status", job), ("list",)):
        result = cli.run(*command, "--json")
        assert result.returncode == 0, result.stderr
        strict_json(result.stdout)


@pytest.mark.parametrize("home_kind", ["file", "/dev/null", "/proc/self/x"])
def test_an_unusable_home_is_exit_2_and_cancel_still_stops_the_job(cli, tmp_path,
                                                                  home_kind):
    from .conftest import assert_no_processes

    spec = fake_spec(tmp_path, "local", "", name="home", workers=1,
                     env={"FAKE_SLEEP": "600"})
    job = cli.submit(spec, "--backend", "local")
    bad = {"file": str(tmp_path / "a-file")}.get(home_kind, home_kind)
    Path(tmp_path / "a-file").write_text("")
    env = {"MXBATCH_HOME": bad}
    for command in (("list",), ("status", job), ("clean", "--state", "ended")):
        result = cli.run(*command, env=env)
        assert result.returncode == 2, (command, result.stderr)
        assert result.stderr.startswith("Error: MXBATCH_HOME: the job records' folder "
                                        f"{bad}/jobs"), result.stderr
        assert "internal error" not in result.stderr
    cancelled = cli.run("cancel", job, env=env)
    assert "internal error" not in cancelled.stderr, cancelled.stderr
    assert_no_processes(job, timeout=30)


@pytest.mark.parametrize("how", ["plan lost", "submitting"])
def test_clean_keeps_a_job_of_unknown_state_that_still_runs(cli, tmp_path, how):
    from .conftest import assert_no_processes, wait_for

    spec = fake_spec(tmp_path, "local", "", name="live", workers=1,
                     env={"FAKE_SLEEP": "600"})
    job = cli.submit(spec, "--backend", "local")
    run_dir = run_dir_of(cli, job)
    record_file = cli.home / "jobs" / f"{job}.json"
    wait_for(lambda: cli.status(job)["state"] == "RUNNING", 60, "the job to run")
    if how == "plan lost":
        (run_dir / "plan.json").unlink()
    else:
        record = json.loads(record_file.read_text())
        record_file.write_text(json.dumps(dict(record, submitting=True)))
    result = cli.run("clean", "--state", "unknown", "--older-than", "1ms")
    assert result.returncode == 0, result.stderr
    assert "still run here" in result.stdout + result.stderr
    assert record_file.is_file() and run_dir.is_dir()
    from mxbatch.runtime import procs

    assert procs.job_processes(job), "clean stopped the job"
    try:
        cli.run("cancel", job)
        assert_no_processes(job, timeout=30)
    finally:
        procs.kill_all(procs.job_processes(job))


def test_records_in_a_home_another_user_can_change_are_never_read(cli, other, scratch):
    """The other user swaps the job records' folder of a 0777 MXBATCH_HOME for one of
    their own holding a planted record: every command that reads records refuses."""
    home = shared_folder(scratch, "0777", other)
    (home / "jobs").mkdir(mode=0o700)
    plant = ("import json, os, sys\nhome = sys.argv[1]\n"
             "os.rename(os.path.join(home, 'jobs'), os.path.join(home, 'jobs.aside'))\n"
             "os.mkdir(os.path.join(home, 'jobs'))\n"
             "with open(os.path.join(home, 'jobs', 'x-0123abcd.json'), 'w') as f:\n"
             "    json.dump({'job_id': 'x-0123abcd', 'backend': 'local'}, f)\n")
    subprocess.run(["setpriv", f"--reuid={other['uid']}", f"--regid={other['gid']}",
                    "--clear-groups", "/usr/bin/python3", "-c", plant, str(home)],
                   check=True)
    for command in (("list",), ("status", "x-0123abcd"), ("cancel", "x-0123abcd"),
                    ("clean", "--state", "unknown")):
        result = cli.run(*command, env={"MXBATCH_HOME": str(home)})
        assert result.returncode == 2, (command, result.stdout, result.stderr)
        assert f"{home} (owner root, mode 0777)" in result.stderr, result.stderr
        assert "x-0123abcd" not in result.stdout


HELD = {"slurm": "extra: [--hold]", "sge": "submitter: qsub, native: [-h]"}


@pytest.mark.parametrize("backend", [
    pytest.param(name, marks=[getattr(pytest.mark, name), pytest.mark.skipif(
        not cluster_env_file(name).is_file() and not os.environ.get("MXBATCH_REQUIRE"),
        reason=f"the {name} test cluster is not up")]) for name in HELD])
def test_clean_keeps_a_queued_batch_job_whose_plan_is_lost(home, tmp_path, backend):
    """A batch job held in its queue (no process anywhere), its plan.json lost: its
    state is unknown, but the scheduler lists it, so clean keeps it; cancel removes it
    by its native ids alone."""
    from . import clusterjobs

    cli = Cli(home, cluster_environment(backend))
    queued = getattr(clusterjobs, f"{backend}_queued")
    spec = fake_spec(tmp_path, backend, HELD[backend], name="held", workers=1)
    job = cli.submit(spec, "--backend", backend)
    try:
        assert queued(cli, job)
        (run_dir_of(cli, job) / "plan.json").unlink()
        result = cli.run("clean", "--state", "unknown", "--older-than", "1ms")
        assert result.returncode == 0, result.stderr
        assert "scheduler still lists a task of it" in result.stderr, result.stderr
        assert (home / "jobs" / f"{job}.json").is_file() and queued(cli, job)
        cancelled = cli.run("cancel", job)
        assert cancelled.returncode == 0, cancelled.stderr
        assert not queued(cli, job)
    finally:
        if queued(cli, job):
            cli.run("cancel", job)
            clusterjobs.wait_queue_empty(lambda: queued(cli, job), job, 60)


def test_launch_refuses_a_shared_folder_from_the_site_config(cli, other, scratch, tmp_path):
    """``launch`` takes its rendezvous dir from the site config: refused alike, before
    anything is created or started."""
    folder = shared_folder(scratch, "1777-other", other)
    config = write_spec(tmp_path / "config.yaml",
                        f"defaults:\n  rendezvous: {{dir: '{folder}'}}\n")
    result = cli.run("launch", "-n", "1", "-s", "1", "--", "python3", "-c", "pass",
                     env={"MXBATCH_CONFIG": str(config)}, cwd=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert f"{folder} (owner {OTHER}, mode 1777)" in result.stderr, result.stderr
    assert "config.yaml" in result.stderr and "rendezvous.dir" in result.stderr
    assert list(folder.iterdir()) == []


def test_a_packed_python_env_another_user_could_write_is_not_reused(tmp_path, other):
    """YARN's ``python_env: auto`` ships its cached archive to every container: one
    another user owns is packed again, never reused; a cache folder others can write
    is refused."""
    from mxbatch.backends.yarn import pyenv
    from mxbatch.errors import BackendUnavailable, MxbatchError

    cache = tmp_path / "python-env"
    cache.mkdir(mode=0o700)
    archive = cache / "env.tar.gz"
    archive.write_bytes(b"ours")
    env = pyenv.PythonEnv(str(archive), auto=True, prefix=str(tmp_path),
                          packer=pyenv.Packer.CONDA_PACK)  # not installed here
    assert pyenv.ensure_packed(env, out=io.StringIO()) is False  # reused
    os.chown(archive, other["uid"], other["gid"])
    with pytest.raises(BackendUnavailable):  # packs again (conda-pack is missing)
        pyenv.ensure_packed(env, out=io.StringIO())
    os.chown(archive, 0, 0)
    cache.chmod(0o777)
    with pytest.raises(MxbatchError, match=r"\(owner root, mode 0777\)"):
        pyenv.ensure_packed(env, out=io.StringIO())
