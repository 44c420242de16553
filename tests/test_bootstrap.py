"""The hosts' bootstrap (``runtime.bootstrap``) run here as a host runs it: ``python -S -c
BOOTSTRAP`` reading the zipapp's header and bytes from stdin, then running it in the
same process; a Python too old exits ``VERSION_EXIT``."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

from mxbatch.runtime.bootstrap import BOOTSTRAP, SIZE_DIGITS, VERSION_EXIT, zipapp_header
from mxbatch.runtime.wire import JOB_ID

#: the stand-in zipapp's __main__: where it runs and with what arguments
MAIN = """import json, os, sys
with open(os.environ["BOOT_OUT"], "w") as out:
    json.dump({"argv": sys.argv, "pid": os.getpid()}, out)
"""


def zipapp() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("__main__.py", MAIN)
    return buffer.getvalue()


def test_every_placeholder_is_filled_and_it_compiles():
    assert "@" not in BOOTSTRAP
    compile(BOOTSTRAP, "<bootstrap>", "exec")
    assert f"sys.exit({VERSION_EXIT})" in BOOTSTRAP
    assert f"read({SIZE_DIGITS})" in BOOTSTRAP
    assert zipapp_header(42) == b"0" * (SIZE_DIGITS - 2) + b"42"


def test_runs_the_zipapp_from_stdin_in_its_own_process(tmp_path: Path):
    out = tmp_path / "out.json"
    data = zipapp()
    proc = subprocess.run([sys.executable, "-S", "-c", BOOTSTRAP],
                          input=zipapp_header(len(data)) + data, capture_output=True,
                          env={"BOOT_OUT": str(out), JOB_ID: "boot-1234abcd",
                               "TMPDIR": str(tmp_path)}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    said = json.loads(out.read_text())
    pyz, command, folder = said["argv"]
    assert command == "remote" and pyz == str(Path(folder) / "runtime.pyz")
    assert Path(folder).parent == tmp_path  # mkdtemp's: the agent removes it when it ends
    assert Path(folder).name.startswith("mxbatch-boot-1234abcd-")
    assert Path(pyz).read_bytes() == data


def test_an_empty_stdin_ends_it_quietly():
    proc = subprocess.run([sys.executable, "-S", "-c", BOOTSTRAP], input=b"",
                          capture_output=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr == b""
