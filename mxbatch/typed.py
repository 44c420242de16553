"""Plugins' name for typed options (option, Seconds): a re-export of
``mxbatch.spec.typed``, where it lives now. Kept for backends written against the
flat layout; nothing inside mxbatch imports it (tests/test_layers.py checks)."""

from .spec.typed import *  # noqa: F403
