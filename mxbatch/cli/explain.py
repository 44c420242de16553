"""``mxbatch explain [KEY]``: what a job-spec key is (like ``kubectl explain``): its
type, default, allowed values, the backends that use it, what it does and an example,
from ``keydocs`` (the schema the parser uses). Without KEY: every key, one a line.

KEY is a dotted path as the spec writes it (``rendezvous.grace``, ``roles.worker.count``,
``backends.slurm.partition``); a section (``rendezvous``, ``backends.slurm``) shows
itself and lists its keys. An unknown key is exit 2 with a "did you mean".
"""

from __future__ import annotations

import textwrap
from typing import List, Optional

import click

from ..errors import BadInput, did_you_mean
from ..runtime.roles import Role
from . import jsonout
from .keydocs import ROLE, KeyDoc, key_docs

#: the width ``explain`` wraps its descriptions at
WIDTH = 88


def normalized(key: str) -> str:
    """``key`` as the docs spell it: a role's name as ``<role>``, no stray dots."""
    parts = [p for p in key.strip().split(".") if p]
    if len(parts) >= 2 and parts[0] == "roles" and parts[1] in {r.value for r in Role}:
        parts[1] = ROLE
    return ".".join(parts)


def select(docs: List[KeyDoc], key: str) -> List[KeyDoc]:
    """The doc of ``key`` and of every key under it (first the key's own, when it is
    one); ``BadInput`` naming the closest key when there is none."""
    wanted = normalized(key)
    chosen = [d for d in docs if d.key == wanted or d.key.startswith(wanted + ".")]
    if not chosen:
        hint = did_you_mean(wanted, [d.key for d in docs],
                            "`mxbatch explain` lists every key", cutoff=0.5)
        raise BadInput(f"{key!r} is no key of a job spec ({hint})")
    return chosen


def _block(label: str, text: str) -> List[str]:
    return [f"{label}:"] + [textwrap.indent(line, "    ") for line in text.splitlines()]


def describe(doc: KeyDoc, every_backend: List[str], under: List[KeyDoc]) -> str:
    """One key as ``explain KEY`` prints it; ``under``: the keys of a section."""
    backends = doc.backends
    used_by = ("every backend (" + ", ".join(backends) + ")"
               if list(backends) == every_backend else ", ".join(backends))
    lines = [f"KEY:      {doc.key}", f"TYPE:     {doc.type}",
             f"DEFAULT:  {doc.default or '-'}"]
    if doc.allowed:
        lines.append(f"VALUES:   {', '.join(doc.allowed)}")
    lines.append(f"BACKENDS: {used_by}")
    lines += ["DESCRIPTION:"] + textwrap.wrap(doc.help, WIDTH, initial_indent="    ",
                                              subsequent_indent="    ")
    if under:
        lines.append("KEYS:")
        width = max(len(d.key) for d in under)
        lines += [f"    {d.key:<{width}}  {d.type}" for d in under]
    lines += _block("EXAMPLE", doc.example.rstrip("\n"))
    return "\n".join(lines) + "\n"


def overview(docs: List[KeyDoc]) -> str:
    """Every key with its type and default, one a line."""
    width = max(len(d.key) for d in docs)
    kind = max(len(d.type) for d in docs)
    rows = [f"{d.key:<{width}}  {d.type:<{kind}}  {d.default}".rstrip() for d in docs]
    return "\n".join(rows) + "\n"


def key_names(ctx: click.Context, param: click.Parameter, incomplete: str) -> List[str]:
    """Shell completion: the keys that start with what was typed."""
    return [d.key for d in key_docs() if d.key.startswith(incomplete)]


@click.command(name="explain")
@click.argument("key", required=False, shell_complete=key_names)
@click.option("--json", "as_json", is_flag=True, help=jsonout.OPTION_HELP)
def explain_command(key: Optional[str], as_json: bool) -> None:
    """Explain a job-spec KEY (rendezvous.grace, roles.worker.count, backends.slurm):
    its type, default, allowed values, the backends that use it and an example.
    Without KEY: every key."""
    docs = key_docs()
    chosen = docs if key is None else select(docs, key)
    if as_json:
        click.echo(jsonout.dumps(jsonout.document({"keys": [d.to_dict() for d in chosen]})))
        return
    if key is None:
        click.echo(overview(docs), nl=False)
        click.echo("\n`mxbatch explain KEY` says more of one key.", err=True)
        return
    every_backend = list(docs[0].backends)  # a key of the spec itself: every backend's
    head = chosen[0]
    if head.key != normalized(key):  # a backend's block, which no doc of its own has
        width = max(len(d.key) for d in chosen)
        click.echo(f"SECTION:  {normalized(key)}\nKEYS:")
        for doc in chosen:
            click.echo(f"    {doc.key:<{width}}  {doc.type}")
        click.echo()
        for doc in chosen:
            click.echo(describe(doc, every_backend, []))
        return
    under = [d for d in chosen[1:] if head.section]
    click.echo(describe(head, every_backend, under), nl=False)
