"""The runtime is standard-library only; the CLI imports no heavy dependency."""

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

from mxbatch.backends import bundle

RUNTIME = Path(__file__).resolve().parent.parent / "mxbatch" / "runtime"


def test_runtime_imports_only_the_standard_library():
    stdlib = set(sys.stdlib_module_names)
    for path in RUNTIME.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                assert name.split(".")[0] in stdlib, f"{path.name} imports {name}"


def test_cli_import_pulls_in_no_heavy_module():
    code = ("import sys, mxbatch.cli, mxbatch.backends.local; "
            "print(sorted(m for m in ('mxnet', 'numpy', 'skein', 'drmaa') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_runtime_zipapp_runs_with_a_bare_python(tmp_path):
    target = bundle.write_runtime(tmp_path / "runtime.pyz")
    assert "mxbatch_runtime/agent.py" in zipfile.ZipFile(target).namelist()
    result = subprocess.run([sys.executable, "-I", str(target), "--help"], capture_output=True,
                            text=True)
    assert result.returncode == 0 and "agent" in result.stdout
    again = bundle.write_runtime(tmp_path / "again.pyz")
    assert again.read_bytes() == target.read_bytes()  # deterministic
