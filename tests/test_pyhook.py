"""The sitecustomize hook: uncaught exceptions exit 1 at once; clean exits are untouched;
an existing sitecustomize still runs."""

import os
import subprocess
import sys

from mxbatch.runtime import pyhook


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
