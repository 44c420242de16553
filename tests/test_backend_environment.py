"""Actionable messages when a batch backend cannot be used from here (no cluster needed)."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import sys
import types

import pytest

from mxbatch.backends.batch import drmaa as drmaa_glue
from mxbatch.backends.batch.sge import SgeBackend, SgeOptions, Submitter
from mxbatch.backends.batch.slurm import SlurmBackend, SlurmOptions
from mxbatch.backends.batch.slurm import Submitter as SlurmSubmitter
from mxbatch.errors import BackendUnavailable


def test_no_drmaa_library_names_the_places_searched(monkeypatch, tmp_path):
    monkeypatch.setenv("SGE_ROOT", str(tmp_path))
    monkeypatch.delenv("DRMAA_LIBRARY_PATH", raising=False)
    monkeypatch.setattr(drmaa_glue, "find_library", lambda environ: None)
    with pytest.raises(BackendUnavailable) as error:
        SgeBackend(SgeOptions(submitter=Submitter.DRMAA)).check_environment()
    message = str(error.value)
    assert "no DRMAA library found" in message and "DRMAA_LIBRARY_PATH" in message
    assert "submitter: qsub" in message


def test_auto_submitter_falls_back_to_qsub_without_a_library(monkeypatch):
    monkeypatch.setattr(drmaa_glue, "find_library", lambda environ: None)
    assert SgeBackend(SgeOptions(submitter=Submitter.AUTO)).submitter() is Submitter.QSUB


def test_library_candidates_cover_the_usual_places(tmp_path):
    lib = tmp_path / "lib" / "lx-amd64"
    lib.mkdir(parents=True)
    (lib / "libdrmaa.so.1.0").write_text("")
    found = drmaa_glue.library_candidates({"SGE_ROOT": str(tmp_path),
                                           "DRMAA_LIBRARY_PATH": "/explicit/libdrmaa.so"})
    assert found[0] == "/explicit/libdrmaa.so"
    assert str(lib / "libdrmaa.so.1.0") in found


def test_helper_environment_adds_the_static_tls_tunable():
    env = drmaa_glue.helper_environment({"GLIBC_TUNABLES": "glibc.malloc.check=1"}, "/lib.so")
    assert env["DRMAA_LIBRARY_PATH"] == "/lib.so"
    assert env["GLIBC_TUNABLES"] == ("glibc.malloc.check=1:"
                                     "glibc.rtld.optional_static_tls=1000000")


def test_sge_root_unset_is_explained(monkeypatch):
    monkeypatch.delenv("SGE_ROOT", raising=False)
    monkeypatch.setattr(SgeBackend, "_environ", lambda self: {"PATH": "/usr/bin"})
    with pytest.raises(BackendUnavailable, match="SGE_ROOT is not set"):
        SgeBackend(SgeOptions(submitter=Submitter.QSUB)).check_environment()


def test_missing_qsub_is_explained(monkeypatch, tmp_path):
    monkeypatch.setenv("SGE_ROOT", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BackendUnavailable, match="qsub is not on PATH"):
        SgeBackend(SgeOptions(submitter=Submitter.QSUB)).check_environment()


def test_missing_sbatch_is_explained(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BackendUnavailable, match="sbatch is not on PATH"):
        SlurmBackend(SlurmOptions(submitter=SlurmSubmitter.SBATCH)).check_environment()


def test_slurm_drmaa_needs_an_explicit_library(monkeypatch):
    monkeypatch.delenv("DRMAA_LIBRARY_PATH", raising=False)
    with pytest.raises(BackendUnavailable, match="DRMAA_LIBRARY_PATH"):
        SlurmBackend(SlurmOptions(submitter=SlurmSubmitter.DRMAA)).check_environment()


class FakeSession:
    """What ``_submit`` uses of a DRMAA session; records the environment at submit time."""

    def __init__(self) -> None:
        self.environ_at_submit = None
        self.template = None

    def createJobTemplate(self):
        return types.SimpleNamespace()

    def deleteJobTemplate(self, template):
        pass

    def runBulkJobs(self, template, first, last, step):
        self.environ_at_submit = dict(os.environ)
        self.template = template
        return [f"7.{i}" for i in range(first, last + 1)]


def test_the_helper_submits_with_the_submitting_environment(monkeypatch):
    """The helper runs with GLIBC_TUNABLES/DRMAA_LIBRARY_PATH for the library, but the
    jobs (-V, slurm-drmaa) must see the submitting environment, not the helper's."""
    submitting = {"PATH": "/usr/bin", "HOME": "/root", "KEEP": "me"}
    client = drmaa_glue.DrmaaClient("/lib/libdrmaa.so", "SGE", submitting)
    assert client.env["GLIBC_TUNABLES"].endswith(drmaa_glue.STATIC_TLS_TUNABLE)
    spec = drmaa_glue.TemplateSpec(remote_command="/bin/true", args=[], job_name="j", native="",
                                   output_path=":out", working_directory="/tmp", count=2,
                                   environment={"MXBATCH_JOB_ID": "j-1"})
    session = FakeSession()
    saved = dict(os.environ)
    try:
        os.environ.update(client.env)  # as the helper process starts
        answer = drmaa_glue._submit(session, None, {"templates": [dataclasses.asdict(spec)],
                                                    "environ": client.environ})
    finally:
        drmaa_glue.use_environment(saved)
    assert answer == {"job_ids": [["7.1", "7.2"]]}
    assert session.environ_at_submit == submitting
    assert session.template.jobEnvironment == {"MXBATCH_JOB_ID": "j-1"}


# --- which scheduler a DRMAA library drives (issue 18, bug 13)

GE, SLURM_SYSTEM = drmaa_glue.DrmSystem.GRID_ENGINE, drmaa_glue.DrmSystem.SLURM
#: Grid Engine's DRMAA library as Debian installs it (gridengine-drmaa1.0)
SGE_LIBRARY = "/usr/lib/gridengine-drmaa/lib/libdrmaa.so.1.0"


@pytest.mark.parametrize("drms_info, system", [
    ("SGE 8.1.9", GE), ("UGE 8.6.4", GE), ("OGS/GE 2011.11p1", GE), ("Grid Engine", GE),
    ("SLURM 23.02.6", SLURM_SYSTEM), ("SLURM", SLURM_SYSTEM), ("PBS Professional", None),
    ("LSF 10.1", None), ("", None)])
def test_the_scheduler_a_library_s_drm_system_names(drms_info, system):
    assert drmaa_glue.DrmSystem.named_in(drms_info) is system


def _libraries_say(monkeypatch, drms_info: str = "", problem: str = ""):
    """Every DRMAA library answers ``drms_info`` (or fails with ``problem``); the
    libraries asked are listed in the list returned."""
    asked = []

    def identify(library, environ):
        asked.append(library)
        return drmaa_glue.LibraryIdentity(library, drms_info, problem)

    monkeypatch.setattr(drmaa_glue, "python_binding_available", lambda: True)
    monkeypatch.setattr(drmaa_glue, "identify", identify)
    return asked


@pytest.mark.parametrize("drms_info, problem, slurm, sge", [
    ("SGE 8.1.9", "", SlurmSubmitter.SBATCH, Submitter.DRMAA),
    ("SLURM 23.02.6", "", SlurmSubmitter.DRMAA, Submitter.QSUB),
    ("", "InternalException: code 1: Please set the environment variable SGE_ROOT.",
     SlurmSubmitter.SBATCH, Submitter.QSUB),
    ("PBS Professional", "", SlurmSubmitter.SBATCH, Submitter.QSUB),
], ids=["grid-engine", "slurm", "unanswered", "other"])
def test_auto_uses_drmaa_only_through_a_library_of_the_backend_s_own_scheduler(
        monkeypatch, tmp_path, drms_info, problem, slurm, sge):
    """DRMAA_LIBRARY_PATH names one library for both backends (both schedulers'
    modules loaded): each uses it only if it drives its own scheduler."""
    asked = _libraries_say(monkeypatch, drms_info, problem)
    library = tmp_path / "libdrmaa.so"
    library.write_text("")
    monkeypatch.setenv("DRMAA_LIBRARY_PATH", str(library))
    monkeypatch.setenv("SGE_ROOT", str(tmp_path))
    assert SlurmBackend(SlurmOptions(submitter=SlurmSubmitter.AUTO)).submitter() is slurm
    assert SgeBackend(SgeOptions(submitter=Submitter.AUTO)).submitter() is sge
    assert set(asked) == {str(library)}


@pytest.mark.parametrize("backend, drms_info, native", [
    ("slurm", "SGE 8.1.9", "sbatch"), ("sge", "SLURM 23.02.6", "qsub")])
def test_an_explicit_drmaa_submitter_with_another_scheduler_s_library_is_exit_3(
        monkeypatch, tmp_path, backend, drms_info, native):
    _libraries_say(monkeypatch, drms_info)
    monkeypatch.setenv("DRMAA_LIBRARY_PATH", str(tmp_path / "libdrmaa.so"))
    (tmp_path / "libdrmaa.so").write_text("")
    monkeypatch.setenv("SGE_ROOT", str(tmp_path))
    chosen = (SlurmBackend(SlurmOptions(submitter=SlurmSubmitter.DRMAA)) if backend == "slurm"
              else SgeBackend(SgeOptions(submitter=Submitter.DRMAA)))
    with pytest.raises(BackendUnavailable) as error:
        chosen.check_environment()
    message = str(error.value)
    assert error.value.exit_code == 3
    assert f"the DRMAA library is {tmp_path / 'libdrmaa.so'}, whose DRM system is " \
           f"{drms_info!r}" in message
    assert f"not a {chosen.drm_system.value} library" in message
    assert f"submitter: {native}" in message
    _libraries_say(monkeypatch, {"slurm": "SLURM 23.02.6", "sge": "SGE 8.1.9"}[backend])
    chosen.check_drmaa_library()  # its own scheduler's library: fine


def test_the_helper_reads_the_drm_system_without_a_session(monkeypatch, capsys):
    """``drmsInfo`` before any session (a session would reach the scheduler)."""
    class Session:
        drmsInfo = "SGE 8.1.9"

        def __init__(self):
            raise AssertionError("no session may be opened to ask")

    monkeypatch.setitem(sys.modules, "drmaa", types.SimpleNamespace(Session=Session))
    monkeypatch.setattr(sys, "stdin", io.StringIO("{}"))
    assert drmaa_glue.helper_main(["system"]) == 0
    answer = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert answer == {"drms_info": "SGE 8.1.9"}


def test_a_library_that_cannot_answer_is_no_scheduler(tmp_path):
    """The real helper process, with a library that is none: a problem, no system."""
    library = tmp_path / "libdrmaa.so"
    library.write_text("not a shared object")
    identity = drmaa_glue.identify(str(library), dict(os.environ))
    assert identity.system is None and identity.problem, identity
    assert "cannot say what it drives" in identity.describe()


@pytest.mark.skipif(not (os.path.exists(SGE_LIBRARY) and drmaa_glue.python_binding_available()
                         and os.path.isdir("/var/lib/gridengine/default")),
                    reason="Grid Engine's DRMAA library or the drmaa package is not here")
def test_grid_engine_s_library_says_so_and_slurm_will_not_use_it(cli, tmp_path):
    """The real library (no session, no scheduler reached): Grid Engine; submit
    --backend slurm with submitter: drmaa and that library is exit 3 before anything
    is submitted."""
    env = {"SGE_ROOT": "/var/lib/gridengine", "SGE_CELL": "default",
           "DRMAA_LIBRARY_PATH": SGE_LIBRARY}
    identity = drmaa_glue.identify(SGE_LIBRARY, dict(os.environ, **env))
    assert identity.system is GE and identity.drms_info.startswith("SGE"), identity
    spec = tmp_path / "job.yaml"
    spec.write_text("command: x\nbackends: {slurm: {submitter: drmaa}}\n")
    result = cli.run("submit", "--backend", "slurm", str(spec), env=env)
    assert result.returncode == 3, result.stderr
    assert f"the DRMAA library is {SGE_LIBRARY}, whose DRM system is 'SGE" in result.stderr
    assert cli.run_dirs() == [] and not (cli.home / "jobs").exists()
