"""``python -m mxbatch`` = the ``mxbatch`` command."""

from .entry import run

run()
