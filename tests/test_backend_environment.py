"""Actionable messages when a batch backend cannot be used from here (no cluster needed)."""

from __future__ import annotations

import dataclasses
import os
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
