"""Actionable messages when a batch backend cannot be used from here (no cluster needed)."""

from __future__ import annotations

import pytest

from mxbatch.backends import drmaa as drmaa_glue
from mxbatch.backends.sge import SgeBackend, SgeOptions, Submitter
from mxbatch.backends.slurm import SlurmBackend, SlurmOptions
from mxbatch.backends.slurm import Submitter as SlurmSubmitter
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
