"""The generated reference covers every spec key the parser accepts and every option of
every command; the troubleshooting page quotes messages the code really prints."""

from __future__ import annotations

import re
from pathlib import Path
from typing import List, Optional

import pytest

from mxbatch.backends import registry
from mxbatch.cli import reference
from mxbatch.errors import SpecError
from mxbatch.runtime.roles import Role
from mxbatch.spec import parse as specs

ROOT = Path(__file__).resolve().parent.parent
PROBE_KEY = "zzqqxx"


def _nest(path: List[str], value) -> dict:
    data = value
    for key in reversed(path):
        data = {key: data}
    return data


def accepted_keys(path: List[str], base: Optional[dict] = None) -> List[str]:
    """The keys the parser accepts at ``path``, asked of the parser itself: an unknown key
    there fails with "valid keys: ..."."""
    data = dict(base or {"command": ["x"]})
    if path:
        merged = _nest(path, {PROBE_KEY: 1})
        data.update({path[0]: merged[path[0]]})
    else:
        data[PROBE_KEY] = 1
    with pytest.raises(SpecError) as error:
        spec = specs.from_mapping(data, base_dir=ROOT)
        for name in spec.backend_options:  # the backends' own blocks: their registry's
            registry.options_for(spec, name)
    hint = error.value.hint or ""
    assert hint.startswith("valid keys: "), (path, str(error.value))
    return hint[len("valid keys: "):].split(", ")


def parser_key_paths() -> List[str]:
    paths = []
    for key in accepted_keys([]):
        paths.append(key)
    for section in ("resources", "network", "rendezvous", "container", "restarts"):
        base = {"command": ["x"]}
        if section == "container":
            base["container"] = {"image": "i"}
        for key in accepted_keys([section], base):
            paths.append(f"{section}.{key}")
    for key in accepted_keys(["roles"]):
        paths.append(f"roles.{key}")
    for key in accepted_keys(["roles", Role.WORKER.value]):
        paths.append(f"roles.<role>.{key}")
    for key in accepted_keys(["roles", Role.WORKER.value, "resources"]):
        paths.append(f"roles.<role>.resources.{key}")
    for name in registry.names():
        for key in accepted_keys(["backends", name]):
            paths.append(f"backends.{name}.{key}")
    return paths


def test_reference_covers_every_key_the_parser_accepts():
    text = reference.spec_reference()
    paths = parser_key_paths()
    assert "roles.<role>.resources.memory" in paths and "backends.sge.queue" in paths
    assert len(paths) > 40
    missing = [p for p in paths if f"`{p}`" not in text
               and not re.fullmatch(r"roles\.(scheduler|server|worker)", p)]  # = <role>
    assert missing == []


def test_every_documented_key_is_accepted(tmp_path):
    # the other direction: a spec made of every documented key parses
    documented = [row[0] for row in reference.spec_rows()]
    parsed = set(parser_key_paths()) | {"roles", "resources", "network", "rendezvous",
                                        "container", "backends", "restarts"}
    assert [k for k in documented if k not in parsed] == []


def test_reference_covers_every_command_and_option():
    from mxbatch.cli.commands import main

    text = reference.cli_reference()
    sections = dict(re.findall(r"^## (mxbatch [a-z ]+)\n(.*?)(?=^## |\Z)", text, re.M | re.S))
    seen = []
    for path, command in reference.commands(main):
        assert path in sections, path
        for name in reference.option_names(command):
            assert f"`{name}`" in sections[path], (path, name)
            seen.append(name)
    assert "--profile" in seen and "--probe-timeout" in seen and "--format" in seen
    assert {"mxbatch doctor", "mxbatch config show", "mxbatch completion"} <= set(sections)


def test_troubleshooting_quotes_messages_the_code_prints():
    page = (ROOT / "docs" / "troubleshooting.md").read_text()
    headings = re.findall(r"^### `(.+)`$", page, re.M)
    assert len(headings) >= 12
    code = "\n".join(p.read_text() for p in (ROOT / "mxbatch").rglob("*.py"))
    code = code.replace("\n", " ")
    for heading in headings:
        for part in re.split(r"…|\.\.\.", heading):
            fragment = part.strip(" :")
            if len(fragment) >= 8:
                squeezed = re.sub(r"\s+", " ", fragment)
                assert squeezed in re.sub(r'"\s+f?"', "", code), heading
