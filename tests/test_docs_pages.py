"""The documentation pages a newcomer reads first (issue 21, item 7): tables that render,
the home page's commands fitting the page, the training-script page naming every
variable a role gets."""

from __future__ import annotations

import re
from pathlib import Path

from mxbatch.runtime import wire
from mxbatch.spec import parse as specs
from mxbatch.spec import plan as planning

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
#: the widest code line the site shows whole at 1280 px (Material's content column)
CODE_WIDTH = 76


def test_no_table_is_cut_by_a_blank_line():
    for page in DOCS.rglob("*.md"):
        lines = page.read_text().splitlines()
        for i in range(1, len(lines) - 1):
            if not lines[i].strip() and lines[i - 1].startswith("|") \
                    and lines[i + 1].startswith("|"):
                raise AssertionError(f"{page}:{i + 1}: a blank line inside a table")


def test_the_home_pages_commands_fit_the_page():
    text = (DOCS / "index.md").read_text()
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.splitlines():
            assert len(line) <= CODE_WIDTH, line


def test_the_training_script_page_names_every_variable_a_role_gets(tmp_path):
    spec = specs.from_mapping({"command": ["python3", "t.py"],
                               "network": {"interface": "lo"}}, base_dir=tmp_path)
    names = set()
    for task in planning.make(spec, "local").run.tasks:
        names |= {n for n in task.env if n.startswith(wire.OWN_PREFIXES)}
    names |= set(wire.RENDEZVOUS_VARIABLES) | {wire.PS_NODE_PORT}
    page = (DOCS / "training-script.md").read_text()
    missing = [n for n in sorted(names) if f"`{n}`" not in page]
    assert not missing, missing
    assert "training-script.md" in (ROOT / "mkdocs.yml").read_text()
    assert wire.METRIC_LINE in page and "samples/sec" in page
