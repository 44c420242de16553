"""The shipped Python environment (``backends.yarn.python_env``) without a cluster: the
golden script, archive checks, ``auto``'s cache key and packing."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from mxbatch.backends.yarn import appspec as yarn_spec
from mxbatch.backends.yarn import pyenv
from mxbatch.errors import SpecError
from mxbatch.jobs import submit as jobs
from mxbatch.spec import parse as specs
from mxbatch.spec import plan as planning

from .yarngolden import GOLDEN_WORKER, SPEC, golden

# ------------------------------------------------------------------ shipped Python environment

#: the worker's script with python_env: the shipped environment's bin leads PATH and its
#: interpreter runs the supervisor; the rest as in GOLDEN_WORKER
GOLDEN_PYTHON_ENV_SCRIPT = GOLDEN_WORKER[GOLDEN_WORKER.index("    script: |"):].replace(
    "      . ./mxbatch-env.sh\n",
    "      . ./mxbatch-env.sh\n"
    '      export PATH="$PWD/python-env/bin:$PATH" VIRTUAL_ENV="$PWD/python-env"\n'
    "      unset PYTHONHOME\n").replace("      /venv/bin/python runtime.pyz",
                                      "      ./python-env/bin/python runtime.pyz")


def env_spec(tmp_path: Path, value: str) -> Path:
    """The golden spec with ``backends.yarn.python_env: value``, as a file."""
    path = tmp_path / "golden.yaml"
    path.write_text(SPEC.replace("tags: [Team-A]}", f"tags: [Team-A], python_env: {value}}}"))
    return path


def env_plan(tmp_path: Path, value: str):
    spec = specs.load(env_spec(tmp_path, value))
    backend = jobs.backend_for_spec(spec, "yarn")
    plan = planning.make(spec, "yarn", job_id="golden-00000001", created_at=0,
                         python="/venv/bin/python")
    return backend, plan


def fake_venv(root: Path, *dists: str) -> Path:
    """A directory that looks like a virtualenv with ``dists`` installed (no files)."""
    site = root / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (root / "pyvenv.cfg").write_text("home = /usr/bin\n")
    for dist in dists:
        (site / f"{dist}.dist-info").mkdir()
    return root


def test_python_env_archive_is_shipped_and_its_interpreter_runs(tmp_path):
    (tmp_path / "env.tar.gz").write_bytes(b"")
    backend, plan = env_plan(tmp_path, "env.tar.gz")
    backend.check(plan)
    request = backend.render(plan, environ={"PATH": "/venv/bin:/usr/bin"})
    text = yarn_spec.spec_yaml(request.application)
    assert ("      python-env:\n        source: %s\n        type: archive\n"
            % (tmp_path / "env.tar.gz")) in text
    assert GOLDEN_PYTHON_ENV_SCRIPT.format() in text
    assert "/venv/bin/python" not in text  # the submitter's interpreter is not used
    shipped = json.loads(request.container_plan)
    assert shipped["python"] == "./python-env/bin/python"
    assert shipped["submit_path"] is None  # the roles keep the script's PATH
    assert request.native_data()["python_env"] == {
        "archive": str(tmp_path / "env.tar.gz"), "auto": False, "prefix": None,
        "packer": None, "interpreter": "./python-env/bin/python"}


def test_without_python_env_nothing_changes(tmp_path):
    backend, plan = golden(tmp_path)
    request = backend.render(plan, environ={"PATH": "/usr/bin"})
    assert "python-env" not in yarn_spec.spec_yaml(request.application)
    assert json.loads(request.container_plan)["python"] == "/venv/bin/python"
    assert request.python_env is None and request.native_data()["python_env"] is None


def test_skein_accepts_the_archive_file(tmp_path):
    skein = pytest.importorskip("skein")
    (tmp_path / "env.tar.gz").write_bytes(b"")
    backend, plan = env_plan(tmp_path, "env.tar.gz")
    spec = skein.ApplicationSpec.from_dict(backend.render(plan).application)
    shipped = spec.services["worker"].files["python-env"]
    assert str(shipped.type).lower() == "archive"
    assert shipped.source.endswith("env.tar.gz")


def test_render_through_the_cli_shows_archive_and_interpreter(cli, tmp_path):
    (tmp_path / "env.tar.gz").write_bytes(b"")
    path = env_spec(tmp_path, "env.tar.gz")
    path.write_text(path.read_text().replace("/shared/runs", str(tmp_path / "runs")))
    result = cli.run("render", "--backend", "yarn", str(path))
    assert result.returncode == 0, result.stderr
    assert "## python-env/ in every container (backends.yarn.python_env)\n" \
           f"archive {tmp_path / 'env.tar.gz'}\n" in result.stdout
    assert "the runtime and the roles run ./python-env/bin/python" in result.stdout
    assert "./python-env/bin/python runtime.pyz run ." in result.stdout
    data = json.loads(cli.run("render", "--json", "--backend", "yarn", str(path)).stdout)
    assert data["native"]["python_env"]["interpreter"] == "./python-env/bin/python"


@pytest.mark.parametrize("value,words", [
    ("missing.tar.gz", "no such archive: {tmp}/missing.tar.gz"),
    ("envdir", "{tmp}/envdir is a directory, not an archive"),
    ("env.whl", "YARN unpacks .tar.gz, .tgz, .tar, .zip archives, not env.whl"),
], ids=["missing", "directory", "not-an-archive"])
def test_unusable_archive_is_a_spec_error_at_its_key(cli, tmp_path, value, words):
    (tmp_path / "envdir").mkdir()
    (tmp_path / "env.whl").write_bytes(b"")
    path = env_spec(tmp_path, value)
    with pytest.raises(SpecError) as error:
        jobs.prepare(specs.load(path), "yarn", for_submit=False)
    assert f"{path}:10: backends.yarn.python_env: " in str(error.value)
    assert words.format(tmp=tmp_path) in str(error.value)
    # the CLI: exit 2, nothing created, no traceback
    result = cli.run("submit", "--backend", "yarn", str(path))
    assert result.returncode == 2, result.stderr
    assert words.format(tmp=tmp_path) in result.stderr and "Traceback" not in result.stderr
    assert not (cli.home / "runs").exists() or not list((cli.home / "runs").iterdir())


def test_archive_path_is_relative_to_the_spec_file(tmp_path):
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "e.tgz").write_bytes(b"")
    assert pyenv.resolve("envs/e.tgz", tmp_path).archive == str(tmp_path / "envs" / "e.tgz")
    assert not pyenv.resolve("envs/e.tgz", tmp_path).auto


def test_auto_names_its_archive_by_what_is_installed(tmp_path):
    venv = fake_venv(tmp_path / "venv", "mxnet-1.9.1", "skein-0.8.2")
    cache = tmp_path / "cache"
    first = pyenv.resolve("auto", tmp_path, prefix=venv, cache=cache)
    assert first.auto and first.packer is pyenv.Packer.VENV_PACK
    assert first.prefix == str(venv)
    assert Path(first.archive).parent == cache and first.archive.endswith(".tar.gz")
    assert Path(first.archive).name.startswith("venv-pack-")
    assert pyenv.resolve("auto", tmp_path, prefix=venv, cache=cache) == first  # stable
    (venv / "lib" / "python3.11" / "site-packages" / "numpy-1.23.5.dist-info").mkdir()
    assert pyenv.resolve("auto", tmp_path, prefix=venv, cache=cache).archive != first.archive
    conda = tmp_path / "conda"
    (conda / "conda-meta").mkdir(parents=True)
    assert pyenv.resolve("auto", tmp_path, prefix=conda, cache=cache).packer \
        is pyenv.Packer.CONDA_PACK


def test_auto_outside_any_environment_is_a_spec_error(tmp_path):
    with pytest.raises(pyenv.PythonEnvError) as error:
        pyenv.resolve("auto", tmp_path, prefix=tmp_path, cache=tmp_path / "cache")
    assert "auto packs a virtualenv or a conda environment" in error.value.problem


def test_render_of_auto_says_whether_it_is_cached(tmp_path):
    venv = fake_venv(tmp_path / "venv", "mxnet-1.9.1")
    env = pyenv.resolve("auto", tmp_path, prefix=venv, cache=tmp_path / "cache")
    assert f"auto: {venv} packed into {env.archive} (not cached yet: packed by venv-pack " \
           "at submission, then reused)" in env.describe()
    Path(env.archive).parent.mkdir()
    Path(env.archive).write_bytes(b"")
    assert "(cached: reused)" in env.describe()
    assert "every node needs the base Python in /usr/bin" in env.describe()


def test_editable_installs_are_named(tmp_path):
    venv = fake_venv(tmp_path / "venv", "mxbatch-0.1.0", "mxnet-1.9.1")
    site = venv / "lib" / "python3.11" / "site-packages"
    (site / "mxbatch-0.1.0.dist-info" / "direct_url.json").write_text(
        json.dumps({"url": "file:///src", "dir_info": {"editable": True}}))
    (site / "mxnet-1.9.1.dist-info" / "direct_url.json").write_text(
        json.dumps({"url": "file:///w.whl", "archive_info": {}}))
    assert pyenv.editable(venv) == ["mxbatch"]


def test_auto_packs_once_then_reuses(tmp_path):
    """A real (small) virtualenv packed by the real venv-pack, then found in the cache."""
    pytest.importorskip("venv_pack")
    venv = tmp_path / "small"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    env = pyenv.resolve("auto", tmp_path, prefix=venv, cache=tmp_path / "cache")
    said = io.StringIO()
    assert pyenv.ensure_packed(env, said) is True
    assert f"packing the Python environment {venv} with venv-pack" in said.getvalue()
    archive = Path(env.archive)
    packed = archive.stat()
    assert [p.name for p in archive.parent.iterdir()] == [archive.name]  # no partial left
    with tarfile.open(archive) as tar:
        assert {"bin/python", "pyvenv.cfg"} <= set(tar.getnames())
    again = io.StringIO()
    assert pyenv.ensure_packed(pyenv.resolve("auto", tmp_path, prefix=venv,
                                             cache=tmp_path / "cache"), again) is False
    assert f"reusing the packed Python environment {archive}" in again.getvalue()
    assert archive.stat().st_mtime_ns == packed.st_mtime_ns
