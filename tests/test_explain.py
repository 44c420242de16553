"""``mxbatch explain`` walks the schema: every key the parser accepts is explained (type,
default, allowed values, backends, example), every example parses and sets its key, and
the generated reference page is made of the same docs and names its real source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from mxbatch.backends import registry
from mxbatch.cli import keydocs, reference
from mxbatch.cli.commands import main
from mxbatch.spec import parse as specs
from mxbatch.spec.located import load_located

from .test_reference import parser_key_paths

ROOT = Path(__file__).resolve().parent.parent
DOCS = keydocs.key_docs()


def explain(*args: str):
    return CliRunner().invoke(main, ["explain", *args])


def _merge(base: dict, upper: dict) -> dict:
    merged = dict(base)
    for key, value in upper.items():
        merged[key] = (_merge(merged[key], value) if isinstance(value, dict)
                       and isinstance(merged.get(key), dict) else value)
    return merged


def _lookup(data, key: str):
    for part in key.split("."):
        data = data[keydocs.EXAMPLE_ROLE if part == keydocs.ROLE else part]
    return data


def test_every_key_the_parser_accepts_is_explained():
    keys = {doc.key for doc in DOCS}
    role_names = {f"roles.{role}" for role in ("scheduler", "server", "worker")}
    missing = [p for p in parser_key_paths() if p not in keys and p not in role_names]
    assert missing == []
    assert {"rendezvous.grace", "roles.<role>.count", "backends.slurm.partition"} <= keys


@pytest.mark.parametrize("doc", DOCS, ids=[doc.key for doc in DOCS])
def test_explain_shows_each_key(doc):
    result = explain(doc.key.replace(keydocs.ROLE, "worker"))
    assert result.exit_code == 0, result.output
    out = result.output
    assert f"KEY:      {doc.key}\n" in out and f"TYPE:     {doc.type}\n" in out
    assert f"DEFAULT:  {doc.default or '-'}\n" in out
    assert "BACKENDS: " in out and "EXAMPLE:\n" in out
    if doc.allowed:
        assert f"VALUES:   {', '.join(doc.allowed)}\n" in out
    if doc.key.startswith("backends."):
        assert doc.backends == (doc.key.split(".")[1],)
    else:
        assert doc.backends == tuple(registry.names())
    for line in doc.example.splitlines():
        assert f"    {line}\n" in out


@pytest.mark.parametrize("doc", DOCS, ids=[doc.key for doc in DOCS])
def test_every_example_parses_and_sets_its_key(doc, tmp_path):
    example, _ = load_located(doc.example, None)  # the spec's own YAML (on: a key)
    base = {"command": ["x"]}
    if doc.key.startswith("container"):
        base["container"] = {"image": "i"}
    spec = specs.from_mapping(_merge(base, example), base_dir=ROOT)
    for name in spec.backend_options:  # the backends' blocks: parsed by their registry
        registry.options_for(spec, name)
    if not doc.section:
        assert _lookup(example, doc.key) is not None


def test_explain_lists_every_key_without_one_and_as_json():
    result = explain()
    assert result.exit_code == 0
    assert [line.split()[0] for line in result.stdout.splitlines() if line.strip()][
        :len(DOCS)] == [d.key for d in DOCS]
    result = explain("restarts", "--json")
    data = json.loads(result.stdout)
    assert data["schema"] == 2 and data["keys"][0]["key"] == "restarts"
    assert "restarts.on" in [k["key"] for k in data["keys"]]
    on = next(k for k in data["keys"] if k["key"] == "restarts.on")
    assert "preempted" in on["allowed"] and "succeeded" not in on["allowed"]


def test_a_section_lists_its_keys_and_a_backend_block_its_options():
    result = explain("rendezvous")
    assert result.exit_code == 0 and "KEYS:\n" in result.output
    assert "rendezvous.stall_timeout" in result.output
    result = explain("backends.slurm")
    assert result.exit_code == 0
    assert "SECTION:  backends.slurm" in result.output
    assert "KEY:      backends.slurm.partition" in result.output


def test_an_unknown_key_is_exit_2_with_the_closest_key(cli):
    result = cli.run("explain", "rendezvous.grac")
    assert result.returncode == 2
    assert "did you mean 'rendezvous.grace'?" in result.stderr


def test_the_reference_page_is_the_same_docs_and_names_its_real_source():
    page = reference.spec_reference()
    assert "`mxbatch/spec/schema.py`" in page and "mxbatch/schema.py" not in page
    assert (ROOT / "mxbatch" / "spec" / "schema.py").is_file()
    assert "mxbatch explain" in page
    for doc in DOCS:
        assert f"| `{doc.key}` |" in page
    hook = (ROOT / "ci" / "mkdocs_hooks.py").read_text()
    assert "generated_pages" in hook


def test_the_docs_build_adds_the_generated_spec_page():
    """ci/mkdocs_hooks.py, as mkdocs runs it: reference/spec.md is a file of the site,
    the explain docs as a table; docs/python-api.md is in the nav."""
    pytest.importorskip("mkdocs")
    import importlib.util

    from mkdocs.config import load_config
    from mkdocs.structure.files import Files

    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "ci" / "mkdocs_hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    config = load_config(str(ROOT / "mkdocs.yml"))
    config.plugins._current_plugin = "mkdocs_hooks"  # as mkdocs sets it while a hook runs
    files = hooks.on_files(Files([]), config)
    page = files.get_file_from_path("reference/spec.md")
    assert page is not None and "`mxbatch/spec/schema.py`" in page.content_string
    assert "| `rendezvous.grace` |" in page.content_string
    assert "python-api.md" in (ROOT / "mkdocs.yml").read_text()


def test_keys_complete_in_the_shell(cli):
    result = cli.run("explain", env={"_MXBATCH_COMPLETE": "bash_complete",
                                     "COMP_WORDS": "mxbatch explain rendezvous.gr",
                                     "COMP_CWORD": "2"})
    assert "rendezvous.grace" in result.stdout, result.stdout + result.stderr
