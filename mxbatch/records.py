"""Plugins' name for the job record (JobRecord): a re-export of
``mxbatch.backends.records``, where it lives now. Kept for backends written against the
flat layout; nothing inside mxbatch imports it (tests/test_layers.py checks)."""

from .backends.records import *  # noqa: F403
