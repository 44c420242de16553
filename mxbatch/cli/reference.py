"""The reference pages of the documentation site, generated from the code.

- ``spec_reference()``: every job-spec key (``keydocs.key_docs``: the ``schema``
  dataclasses' ``spec_field`` metadata and, for ``backends.<name>``, each backend's
  options dataclass through the registry), as ``mxbatch explain`` shows them; then the
  config file's own keys (``config``).
- ``cli_reference()``: every command and option, from the click commands themselves.

``generated_pages()`` maps the site paths to their text; the mkdocs hook
(``ci/mkdocs_hooks.py``) adds them to the site when it builds, so they cannot drift.
"""

from __future__ import annotations

import inspect
from typing import Dict, Iterator, List, Tuple

import click

from .keydocs import ROLE, key_docs

__all__ = ["ROLE", "cli_reference", "generated_pages", "spec_reference", "spec_rows"]

Row = Tuple[str, str, str, str]  # key path, type, default, meaning


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def project_description() -> str:
    """The one-line description of the project (pyproject.toml, the site), naming the
    backends mxbatch ships, from the registry."""
    from ..backends import registry

    names = registry.builtin_names()
    return ("Run Apache MXNet parameter-server training (scheduler, servers, workers) on "
            f"{', '.join(names[:-1])} and {names[-1]} backends")


def spec_rows() -> List[Row]:
    """Every key of a job spec as a row of the reference (``keydocs.key_docs``)."""
    return [doc.row() for doc in key_docs()]


def _table(rows: List[Row]) -> str:
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    lines += [f"| `{key}` | {_cell(tp)} | {_cell(default)} | {_cell(meaning)} |"
              for key, tp, default, meaning in rows]
    return "\n".join(lines) + "\n"


def spec_reference() -> str:
    """The job spec reference page (Markdown)."""
    from ..spec.config import CONFIG_KEYS, JOB_ONLY_KEYS, PROFILE_KEYS
    from .jsonout import SCHEMA

    rows = spec_rows()
    sections: Dict[str, List[Row]] = {}
    for row in rows:
        head = row[0].split(".")[0]
        section = head if head in ("resources", "roles", "network", "rendezvous", "container",
                                   "restarts", "backends") else "top level"
        sections.setdefault(section, []).append(row)
    parts = ["# Job spec reference\n",
             "Generated from the code (`mxbatch/spec/schema.py` and each backend's options "
             "dataclass) when the site is built; `mxbatch explain KEY` shows the same for "
             "one key, with its allowed values, the backends that use it and an example. A "
             "spec is YAML; a key that is not listed here is an error naming the file, the "
             "line and the key (with a \"did you mean\"). `<role>` is `scheduler`, `server` "
             "or `worker`. Types: a *duration* is seconds or `30s`, `10m`, `1h30m`; a *size* "
             "is `512M`, `2G`, `1.5GiB` (a number: MiB).\n"]
    for section, section_rows in sections.items():
        parts.append(f"## {section}\n")
        parts.append(_table(section_rows))
    parts.append("## The config file\n")
    parts.append(
        "`~/.config/mxbatch/config.yaml` (`$XDG_CONFIG_HOME/mxbatch/config.yaml`; "
        "`MXBATCH_CONFIG` names another file, empty: none) has the keys "
        + ", ".join(f"`{k}`" for k in CONFIG_KEYS) + ". `defaults` and each "
        "`profiles.<name>` hold spec keys, all those above but "
        + ", ".join(f"`{k}`" for k in JOB_ONLY_KEYS) + " (they describe one job): "
        + ", ".join(f"`{k}`" for k in PROFILE_KEYS) + ". `default_profile` names the "
        "profile used when no `--profile` is given. See [Configuration]"
        "(../configuration.md).\n")
    parts.append(f"## JSON output\n\nEvery `--json` document carries `\"schema\": {SCHEMA}`; "
                 "see [JSON output](json.md).\n")
    return "\n".join(parts)


# --------------------------------------------------------------------------- CLI


def commands(group: click.Group, prefix: str = "mxbatch"
             ) -> Iterator[Tuple[str, click.Command]]:
    """``("mxbatch config show", command)`` for every command under ``group``."""
    context = click.Context(group)
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        if command is None or command.hidden:
            continue
        path = f"{prefix} {name}"
        if isinstance(command, click.Group):
            yield from commands(command, path)
        else:
            yield path, command


def option_names(command: click.Command) -> List[str]:
    """Every option spelling of ``command`` (``-n``, ``--workers``, ``--no-logs``...)."""
    names = []
    for param in command.params:
        if isinstance(param, click.Option):
            names += list(param.opts) + list(param.secondary_opts)
    return names


def _usage(path: str, command: click.Command) -> str:
    context = click.Context(command, info_name=path)
    return " ".join(command.collect_usage_pieces(context))


def cli_reference() -> str:
    """The command-line reference page (Markdown), from the click commands."""
    from .commands import main

    parts = ["# Command-line reference\n",
             "Generated from the commands themselves when the site is built. Exit codes: "
             "0 success, 1 the job failed or was cancelled (doctor: a check failed), 2 bad "
             "input (nothing was created), 3 backend unavailable, 4 no such job, 70 "
             "internal error of mxbatch (a bug; the traceback is in the log it names), 124 "
             "`wait --timeout`, 130 interrupted. Shell completion: "
             "`eval \"$(mxbatch completion bash)\"`.\n"]
    for path, command in commands(main):
        parts.append(f"## {path}\n")
        parts.append(f"```\n{path} {_usage(path, command)}\n```\n")
        if command.help:
            parts.append(inspect.cleandoc(command.help).replace("\b\n", "") + "\n")
        if command.epilog:  # what its arguments may be (a job: an id, a prefix, last)
            parts.append(inspect.cleandoc(command.epilog) + "\n")
        rows = ["| option | meaning | default |", "|---|---|---|"]
        for param in command.params:
            if not isinstance(param, click.Option):
                continue
            spellings = ", ".join(f"`{n}`" for n in list(param.opts) + list(param.secondary_opts))
            if param.metavar:
                spellings += f" {param.metavar}"
            elif isinstance(param.type, click.Choice):
                spellings += " " + "\\|".join(param.type.choices)
            default = "" if param.is_flag or param.default is None else str(param.default)
            rows.append(f"| {spellings} | {_cell(param.help or '')} | {_cell(default)} |")
        if len(rows) > 2:
            parts.append("\n".join(rows) + "\n")
    return "\n".join(parts)


def generated_pages() -> Dict[str, str]:
    """Site path -> Markdown of every generated page."""
    return {"reference/spec.md": spec_reference(), "reference/cli.md": cli_reference()}
