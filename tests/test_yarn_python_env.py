"""A shipped Python environment on the real YARN test cluster (``backends.yarn.python_env``):
the example dist_sync job runs every role with the interpreter YARN unpacked into its
container, not the submitter's virtualenv; ``auto`` packs this environment once and
later submissions reuse the cached archive."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Dict, Tuple

import pytest

from .conftest import Cli
from .test_mxnet_local import assert_trained
from .test_yarn import spec_file

pytestmark = [pytest.mark.yarn, pytest.mark.mxnet]

#: submitting packs an environment of ~150 MB, and the test cluster's NodeManager takes
#: about 2 minutes to localize it: minutes on a loaded machine
SUBMIT_TIMEOUT_S = 900
TASKS = (("scheduler", 0), ("server", 0), ("server", 1), ("worker", 0), ("worker", 1))
#: runs the role's script after saying which Python runs it, from where
WHERE = '''\
"""Says which Python runs the role, then runs the script given, as the role's command."""
import os
import runpy
import shutil
import sys

print("PYENV prefix=%s executable=%s python3=%s container=%s" % (
    sys.prefix, sys.executable, shutil.which("python3"), os.environ.get("CONTAINER_ID")),
    flush=True)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
'''
LINE = re.compile(r"PYENV prefix=(\S+) executable=(\S+) python3=(\S+) container=(\S+)")


def env_spec(tmp_path: Path, python_env: str, name: str) -> Path:
    """The example job (1G containers) with ``python_env``, every role through WHERE."""
    path = spec_file(tmp_path, f"python_env: {python_env}", name=name)
    (tmp_path / f"{name}-workdir" / "where.py").write_text(WHERE)
    text = path.read_text().replace("command: python3 train_mlp.py",
                                    "command: python3 where.py train_mlp.py")
    path.write_text(text)
    return path


def submit(cli: Cli, spec: Path) -> Tuple[str, str]:
    """``submit --wait`` of the example job: (job id, stderr); it trained."""
    result = cli.run("submit", "--backend", "yarn", "--wait", str(spec), env={"EPOCHS": "2"},
                     timeout=SUBMIT_TIMEOUT_S)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_trained(result.stdout)
    return result.stdout.split()[0], result.stderr


def assert_shipped_python(cli: Cli, job: str) -> Dict[Tuple[str, int], str]:
    """Every role ran the interpreter of ``python-env/`` in its own container's
    directory (and ``python3`` on its PATH was that one), never the submitter's."""
    prefixes = {}
    for role, rank in TASKS:
        logs = cli.run("logs", job, "--role", role, "--rank", str(rank))
        assert logs.returncode == 0, logs.stderr
        found = LINE.search(logs.stdout)
        assert found, (role, rank, logs.stdout[-2000:])
        prefix, executable, python3, container = found.groups()
        # YARN's container directory: .../appcache/<application>/<container id>/
        assert Path(prefix).name == "python-env" and Path(prefix).parent.name == container, \
            found.group(0)
        assert "/appcache/application_" in prefix, found.group(0)
        assert Path(executable).parent == Path(prefix) / "bin", found.group(0)
        assert python3 == str(Path(prefix) / "bin" / "python3"), found.group(0)
        assert not prefix.startswith(sys.prefix) and not executable.startswith(sys.prefix)
        prefixes[(role, rank)] = prefix
    assert len(set(prefixes.values())) == len(TASKS)  # one unpacked copy per container
    return prefixes


def test_auto_packs_once_and_later_submissions_reuse_it(yarn, tmp_path):
    """One real job: ``auto`` packs this environment (once), YARN unpacks it, every role
    runs it. A later submission resolves to the same cached archive (``render`` says so;
    ``submit`` decides with the same ``pyenv.resolve``) and packs nothing. (A given
    archive path ships through the same code after ``resolve``: test_yarn_pyenv_render;
    a second real job here would cost minutes of the test cluster's localization.)"""
    spec = env_spec(tmp_path, "auto", "yarn-pyenv-auto")
    job, stderr = submit(yarn, spec)
    assert f"packing the Python environment {sys.prefix} with venv-pack" in stderr
    cache = yarn.home / "cache" / "python-env"
    archives = list(cache.iterdir())
    assert len(archives) == 1 and archives[0].name.endswith(".tar.gz"), archives
    packed = archives[0].stat()
    assert_shipped_python(yarn, job)

    again = yarn.run("render", "--backend", "yarn", str(spec))
    assert again.returncode == 0, again.stderr
    assert f"packed into {archives[0]} (cached: reused)" in again.stdout, again.stdout
    assert list(cache.iterdir()) == archives
    assert archives[0].stat().st_mtime_ns == packed.st_mtime_ns  # not packed again
