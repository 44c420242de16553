"""The sitecustomize hook: uncaught exceptions exit 1 at once; clean exits are untouched;
an existing sitecustomize still runs; it reports the role's Python and MXNet, and when the
script's code has finished; a lean scheduler runs MXNet's library instead of its script."""

import os
import shutil
import subprocess
import sys

import pytest

from mxbatch.runtime import pyhook, rolehook


def run_python(code, hook_dir, extra_path=None):
    path = [hook_dir] + ([extra_path] if extra_path else [])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=30)


def test_uncaught_exception_exits_1_even_if_atexit_would_block(tmp_path):
    hook = pyhook.install(str(tmp_path / "hook"))
    # An atexit handler that never returns stands for MXNet's kvstore exit barrier.
    code = "import atexit, time; atexit.register(lambda: time.sleep(600)); raise ValueError('x')"
    result = run_python(code, hook)
    assert result.returncode == 1
    assert "ValueError: x" in result.stderr


def test_clean_exit_and_sys_exit_are_untouched(tmp_path):
    hook = pyhook.install(str(tmp_path / "hook"))
    assert run_python("print('ok')", hook).returncode == 0
    assert run_python("import sys; sys.exit(3)", hook).returncode == 3


def test_existing_sitecustomize_still_runs(tmp_path):
    hook = pyhook.install(str(tmp_path / "hook"))
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import builtins; builtins.OTHER_HOOK = 1\n")
    result = run_python("import builtins; print(builtins.OTHER_HOOK)", hook, str(other))
    assert result.returncode == 0 and result.stdout.strip() == "1"


def test_install_is_idempotent(tmp_path):
    first = pyhook.install(str(tmp_path / "hook"))
    assert pyhook.install(first) == first
    assert os.listdir(first) == ["sitecustomize.py"]


def test_the_hook_is_readable_by_any_user_whatever_the_umask(tmp_path):
    """A container mounts the hook directory alone, and its user may be another uid
    (an image's own user): 0755 and 0644, also over a 0700 directory of an older run."""
    directory = tmp_path / "hook"
    directory.mkdir(mode=0o700)
    old = os.umask(0o077)
    try:
        pyhook.install(str(directory))
    finally:
        os.umask(old)
    assert directory.stat().st_mode & 0o777 == 0o755
    assert (directory / "sitecustomize.py").stat().st_mode & 0o777 == 0o644
    (directory / "sitecustomize.py").chmod(0o600)  # the same content, closed
    pyhook.install(str(directory))
    assert (directory / "sitecustomize.py").stat().st_mode & 0o777 == 0o644


def reports(stderr):
    """(event, data) of each hook report line in ``stderr``."""
    found = []
    for line in stderr.splitlines():
        report = rolehook.parse_line(line.encode())
        if report is not None:
            found.append((report.event.value, report))
    return found


def test_it_reports_the_start_and_the_end_of_the_scripts_code_once(tmp_path):
    """One report pair, from the role's first process: after its non-daemon threads,
    before atexit handlers; its child processes (a subprocess, here) stay silent."""
    hook = pyhook.install(str(tmp_path / "hook"))
    code = ("import atexit, subprocess, sys, threading, time\n"
            "atexit.register(lambda: print('atexit', file=sys.stderr, flush=True))\n"
            "threading.Thread(target=lambda: (time.sleep(0.3), "
            "print('thread', file=sys.stderr, flush=True))).start()\n"
            "subprocess.run([sys.executable, '-c', 'pass'], check=True)\n")
    result = run_python(code, hook)
    assert result.returncode == 0, result.stderr
    seen = reports(result.stderr)
    assert [event for event, _ in seen] == ["started", "finished"], result.stderr
    assert seen[0][1].pid == seen[1][1].pid
    environment = seen[0][1].environment
    assert environment.python == "%d.%d.%d" % sys.version_info[:3]
    lines = result.stderr.splitlines()
    finished = next(i for i, line in enumerate(lines) if "finished" in line)
    assert lines.index("thread") < finished < lines.index("atexit")


def test_an_uncaught_exception_is_no_finished_code(tmp_path):
    hook = pyhook.install(str(tmp_path / "hook"))
    result = run_python("raise ValueError('x')", hook)
    assert result.returncode == 1
    assert [event for event, _ in reports(result.stderr)] == ["started"]


def test_mxnet_is_found_without_importing_it(tmp_path):
    """The version from the package's libinfo.py, else from a dist-info beside it; a
    package in the script's own directory comes first, as the import would take it."""
    hook = pyhook.install(str(tmp_path / "hook"))
    site = tmp_path / "site"
    (site / "mxnet").mkdir(parents=True)
    (site / "mxnet" / "__init__.py").write_text("raise SystemExit('imported')\n")
    (site / "mxnet-1.7.0.dist-info").mkdir()
    result = run_python("pass", hook, str(site))
    environment = reports(result.stderr)[0][1].environment
    assert (environment.mxnet, environment.mxnet_path) == ("1.7.0", str(site / "mxnet"))
    (site / "mxnet" / "libinfo.py").write_text("x = 1\n__version__ = '1.8.0'\n")
    environment = reports(run_python("pass", hook, str(site)).stderr)[0][1].environment
    assert environment.mxnet == "1.8.0"
    local = tmp_path / "project"
    (local / "mxnet").mkdir(parents=True)
    (local / "mxnet" / "__init__.py").write_text("")
    (local / "mxnet" / "libinfo.py").write_text('__version__ = "2.0.0"\n')
    (local / "train.py").write_text("pass\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([hook, str(site)]))
    result = subprocess.run([sys.executable, str(local / "train.py")], capture_output=True,
                            text=True, env=env, timeout=30)
    assert reports(result.stderr)[0][1].environment.mxnet == "2.0.0"


FAKE_LIBMXNET = r"""
#include <stdio.h>
#include <stdlib.h>
static const char *error = "";
int MXKVStoreCreate(const char *type, void **out) {
    if (getenv("FAKE_CREATE_FAILS")) { error = "fake ps-lite refused"; return -1; }
    printf("create %s\n", type); fflush(stdout); *out = (void *)1; return 0;
}
int MXKVStoreRunServer(void *handle, void (*controller)(int, const char *, void *), void *c) {
    printf("serve\n"); fflush(stdout); return 0;
}
const char *MXGetLastError(void) { return error; }
"""


@pytest.fixture
def fake_mxnet(tmp_path):
    """A site directory with an ``mxnet`` package whose ``libinfo`` names a library of
    MXNet's three functions that a lean scheduler calls (they print what they do)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler for the fake MXNet library")
    package = tmp_path / "site" / "mxnet"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("print('the package was imported')\n")
    (package / "libinfo.py").write_text(
        "import os\n__version__ = '1.9.1'\n\n\ndef find_lib_path(prefix='libmxnet'):\n"
        "    return [os.path.join(os.path.dirname(__file__), prefix + '.so')]\n")
    (tmp_path / "fake.c").write_text(FAKE_LIBMXNET)
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(package / "libmxnet.so"),
                    str(tmp_path / "fake.c")], check=True, timeout=60)
    return tmp_path / "site"


def run_scheduler(tmp_path, site, script, **env):
    hook = pyhook.install(str(tmp_path / "hook"))
    path = tmp_path / "train.py"
    path.write_text(script)
    environ = dict(os.environ, PYTHONPATH=os.pathsep.join([hook, str(site)]),
                   DMLC_ROLE="scheduler", MXBATCH_SCHEDULER="lean")
    environ.update(env)
    environ.pop("MXBATCH_HOOK_PID", None)
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                          env=environ, timeout=30)


def test_a_lean_scheduler_makes_mxnets_calls_without_its_script(tmp_path, fake_mxnet):
    """The script only binds names and imports before MXNet: the hook calls the library's
    MXKVStoreCreate("dist") and MXKVStoreRunServer, reports connecting and finished,
    and exits 0 without running the script or importing the package."""
    result = run_scheduler(tmp_path, fake_mxnet, '"""doc"""\nimport os\nT0 = 1\n\n\n'
                                                 'def f():\n    pass\n\n\nimport mxnet\n'
                                                 'print("the script ran")\n')
    assert result.returncode == 0, result.stderr
    assert result.stdout == "create dist\nserve\n"
    assert [event for event, _ in reports(result.stderr)] == ["started", "connecting",
                                                              "finished"], result.stderr
    assert "runs ps-lite's scheduler from " + str(fake_mxnet / "mxnet" / "libmxnet.so") \
        in result.stderr
    failed = run_scheduler(tmp_path, fake_mxnet, "from mxnet import gluon\n",
                           FAKE_CREATE_FAILS="1")
    assert failed.returncode == 1 and failed.stdout == ""
    assert "the scheduler failed in MXNet: fake ps-lite refused" in failed.stderr
    assert [event for event, _ in reports(failed.stderr)] == ["started", "connecting"]


@pytest.mark.parametrize("script", [
    "import sys\nsys.path.insert(0, '/elsewhere')\nimport mxnet\n",  # a call first
    "import os\nos.environ['PS_VERBOSE'] = '1'\nimport mxnet\n",     # a subscript first
    "try:\n    import mxnet\nexcept ImportError:\n    pass\n",        # not at module level
    "import numpy\n",                                                  # no MXNet at all
])
def test_a_script_that_does_more_before_mxnet_runs_as_it_is(tmp_path, fake_mxnet, script):
    result = run_scheduler(tmp_path, fake_mxnet, script + "print('the script ran')\n")
    assert "create dist" not in result.stdout and "runs ps-lite's" not in result.stderr
    assert "the script ran" in result.stdout or "No module named" in result.stderr


def test_only_a_lean_scheduler_skips_its_script(tmp_path, fake_mxnet):
    script = "import mxnet\nprint('the script ran')\n"
    for env in ({"MXBATCH_SCHEDULER": "script"}, {"DMLC_ROLE": "server"}):
        result = run_scheduler(tmp_path, fake_mxnet, script, **env)
        assert result.returncode == 0, result.stderr
        assert result.stdout == "the package was imported\nthe script ran\n"
