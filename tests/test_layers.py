"""The house's rules: the layer contract (import-linter), no import cycle even counting
function-level and TYPE_CHECKING imports, few modules at the top, each wire name
spelled in one module, and the names plugins and running jobs use still importable."""

from __future__ import annotations

import ast
import importlib
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Dict, Iterator, List, Set

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "mxbatch"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> Dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported_modules(name: str, path: Path, known: Set[str]) -> Iterator[str]:
    """Every mxbatch module ``path`` imports, wherever the statement stands."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("mxbatch"):
                continue
            for alias in node.names:
                child = f"{target}.{alias.name}"
                yield child if child in known else target


def import_graph() -> Dict[str, Set[str]]:
    found = modules()
    known = set(found)
    graph: Dict[str, Set[str]] = defaultdict(set)
    for name, path in found.items():
        for target in imported_modules(name, path, known):
            if target != name and target in known:
                graph[name].add(target)
    return graph


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(set(graph) | {t for ts in graph.values() for t in ts}):
        if node not in index:
            visit(node)
    return found


def test_the_layer_contract_holds():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint, "import-linter is a test dependency (pip install -e '.[test]')"
    result = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BROKEN" not in result.stdout and result.stdout.count("KEPT") >= 4


def test_no_import_cycle_counting_every_import_statement():
    graph = import_graph()
    assert "mxbatch.spec.parse" in graph and "mxbatch.backends.base" in graph  # it reads
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_at_most_eight_modules_at_the_top():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 8, top


def string_constants(path: Path) -> Iterator[str]:
    """String literals of a module that are not docstrings."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in docstrings):
            yield node.value


#: a string that is a variable's name, or assigns one (prose that mentions a name is fine)
NAME = r"(?:MXBATCH|DMLC)_[A-Z][A-Z0-9_]*"
WIRE_NAME = re.compile(rf"^({NAME})$|\b({NAME})=")


def test_each_wire_name_is_a_literal_in_one_module():
    spelled: Dict[str, Set[str]] = defaultdict(set)
    for name, path in modules().items():
        for text in string_constants(path):
            for whole, assigned in WIRE_NAME.findall(text):
                spelled[whole or assigned].add(name)
    wire = importlib.import_module("mxbatch.runtime.wire")
    owned = {value for value in vars(wire).values() if isinstance(value, str)}
    assert {"MXBATCH_JOB_ID", "DMLC_PS_ROOT_URI", "DMLC_NODE_HOST"} <= owned
    for word, where in sorted(spelled.items()):
        if word in owned:
            assert where == {"mxbatch.runtime.wire"}, (word, sorted(where))
        else:
            assert len(where) == 1, (word, sorted(where))


def test_channel_message_types_are_literals_in_wire_only():
    """The ssh channel's message types ("setup", "hello", "call", ...) are spelled once:
    ``wire.MessageType``; every other module names the member."""
    wire = importlib.import_module("mxbatch.runtime.wire")
    types = {member.value for member in wire.MessageType}
    assert {"setup", "hello", "call", "bye"} <= types
    channel_modules = {"mxbatch.runtime.remote", "mxbatch.runtime.channel",
                       "mxbatch.runtime.channelrdv", "mxbatch.backends.hosts.sshcontrol"}
    all_modules = modules()
    assert channel_modules <= set(all_modules)
    for name in sorted(channel_modules):
        spelled = types & set(string_constants(all_modules[name]))
        assert not spelled, (name, sorted(spelled))
    assert wire.TYPE_KEY not in set(string_constants(all_modules["mxbatch.runtime.remote"]))


def test_run_directory_file_names_are_the_layouts():
    names = {"plan.json", "scheduler.json", "abort.json", "abort.lock", "digest.json",
             "runtime.pyz", "manager.log", "mpirun.log"}
    for name, path in modules().items():
        if name == "mxbatch.runtime.layout":
            continue
        for text in string_constants(path):
            assert text not in names, (name, text)
            assert not re.search(r"(^|/)(logs|tasks)/", text), (name, text)


@pytest.mark.parametrize("name", [
    "mxbatch.cli.entry",               # the console entry point (pyproject)
    "mxbatch.backends.controller",     # python -m: the ssh/MPI controller's old path
    "mxbatch.backends.hosts.controller",
    "mxbatch.backends.drmaa",          # python -m: the DRMAA helper's old path
    "mxbatch.backends.batch.drmaa",
    "mxbatch.backends.yarn_kv",        # running YARN containers name it (--kv-store)
    "mxbatch.backends.base",           # what plugins import
    "mxbatch.backends.local",
    "mxbatch.plan",
    "mxbatch.records",
    "mxbatch.typed",
    "mxbatch.runtime.roles",
])
def test_names_users_plugins_and_running_jobs_use_still_import(name):
    importlib.import_module(name)


def test_plugin_names_keep_their_members():
    from mxbatch import plan, records, typed

    assert plan.JobPlan.__module__ == "mxbatch.spec.plan"
    assert records.JobRecord.__module__ == "mxbatch.backends.records"
    assert callable(records.save) and callable(records.load) and callable(records.mxbatch_home)
    assert callable(typed.option) and typed.Seconds is not None


def test_the_old_python_dash_m_paths_run_the_moved_programs():
    from mxbatch.backends import controller, drmaa
    from mxbatch.backends.batch import drmaa as moved_drmaa
    from mxbatch.backends.hosts import controller as moved_controller

    assert controller.main is moved_controller.main
    assert drmaa.helper_main is moved_drmaa.helper_main
    result = subprocess.run([sys.executable, "-m", "mxbatch", "--help"], capture_output=True,
                            text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 0 and "submit" in result.stdout, result.stderr
