"""Shell completion (click's): job ids from the job records, profile names (backend
names: ``params.BackendName``), and ``mxbatch completion SHELL``, which prints the
script to source.

    eval "$(mxbatch completion bash)"      # in ~/.bashrc (zsh: ~/.zshrc)
    mxbatch completion fish > ~/.config/fish/completions/mxbatch.fish
"""

from __future__ import annotations

from typing import List

import click

from ..spec.paths import jobs_dir

#: the environment variable click's completion protocol uses for this program
COMPLETE_VAR = "_MXBATCH_COMPLETE"


def job_ids(ctx: click.Context, param: click.Parameter, incomplete: str) -> List[str]:
    """Ids of the recorded jobs starting with ``incomplete``, newest first, then ``last``
    (``backends.jobrefs.LAST``: the newest job) when it starts with ``incomplete`` and
    there is a job."""
    from ..backends.jobrefs import LAST

    jobs = jobs_dir()
    try:
        paths = sorted(jobs.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return []
    ids = [p.stem for p in paths if p.stem.startswith(incomplete)]
    return ids + ([LAST] if paths and LAST.startswith(incomplete) else [])


def profile_names(ctx: click.Context, param: click.Parameter, incomplete: str) -> List[str]:
    from ..spec.config import load_config

    try:
        profiles = sorted(load_config().profiles)
    except click.ClickException:  # a broken config file: nothing to offer
        return []
    return [name for name in profiles if name.startswith(incomplete)]


@click.command(name="completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion_command(shell: str) -> None:
    """Print the completion script for SHELL: eval "$(mxbatch completion bash)"."""
    from click.shell_completion import get_completion_class

    root = click.get_current_context().find_root().command
    completion_class = get_completion_class(shell)
    assert completion_class is not None  # click knows the three choices
    click.echo(completion_class(root, {}, "mxbatch", COMPLETE_VAR).source())
