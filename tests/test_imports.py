"""The runtime is standard-library only; the CLI imports no heavy dependency."""

import ast
import os
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


def test_runtime_zipapp_is_built_once_per_content(tmp_path):
    """The archive comes from the cache the second time, byte for byte the one built;
    other contents' archives beyond CACHED_ARCHIVES go; an unusable cache only costs the
    build."""
    cache = tmp_path / "cache"
    first = bundle.write_runtime(tmp_path / "first.pyz", cache).read_bytes()
    (cached,) = cache.glob("runtime-*.pyz")
    assert cached.read_bytes() == first
    os.utime(cached, (1, 1))
    assert bundle.write_runtime(tmp_path / "second.pyz", cache).read_bytes() == first
    assert cached.stat().st_mtime > 1  # its use is recorded

    for n in range(bundle.CACHED_ARCHIVES + 2):
        bundle.cached_archive({"__main__.py": b"# other %d\n" % n}, cache)
    kept = {p.name for p in cache.glob("runtime-*.pyz")}
    assert len(kept) == bundle.CACHED_ARCHIVES + 1 and cached.name not in kept

    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    assert bundle.write_runtime(tmp_path / "third.pyz", blocked).read_bytes() == first


def test_runtime_zipapp_carries_the_installed_bytecode(tmp_path):
    """A fresh ``__pycache__`` file goes in beside its module and is what a node of the
    same Python imports (its code names the installed file); a stale one stays out."""
    import compileall

    assert compileall.compile_dir(str(RUNTIME), quiet=1, force=False)
    target = bundle.write_runtime(tmp_path / "runtime.pyz")
    assert "mxbatch_runtime/layout.pyc" in zipfile.ZipFile(target).namelist()
    code = ("import inspect, sys; sys.path.insert(0, sys.argv[1]); "
            "import mxbatch_runtime.layout as m; "
            "print([f for f in vars(m).values() if inspect.isfunction(f)"
            " and f.__module__ == m.__name__][0].__code__.co_filename)")
    out = subprocess.run([sys.executable, "-I", "-c", code, str(target)], capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out.endswith("mxbatch/runtime/layout.py")  # compiled source: runtime.pyz/...

    source = tmp_path / "module.py"
    source.write_text("VALUE = 1\n")
    compileall.compile_file(str(source), quiet=1)
    pyc = bundle.installed_bytecode(source)
    assert pyc is not None and pyc[4:8] == (1).to_bytes(4, "little")
    source.write_text("VALUE = 22\n")  # another size: the cached file is stale
    assert bundle.installed_bytecode(source) is None


def test_every_dataclass_states_its_contract_in_a_docstring():
    """A dataclass without one also costs its import time: Python 3.11 then builds a
    docstring from ``inspect.signature`` (0.3-0.7 ms a class, on a CLI's start)."""
    package = RUNTIME.parent
    undocumented = []
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ClassDef) or ast.get_docstring(node):
                continue
            if any("dataclass" in ast.unparse(decorator) for decorator in node.decorator_list):
                undocumented.append(f"{path.relative_to(package)}:{node.name}")
    assert undocumented == []
