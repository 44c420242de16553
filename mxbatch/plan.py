"""Plugins' name for the job plan (JobPlan): a re-export of
``mxbatch.spec.plan``, where it lives now. Kept for backends written against the
flat layout; nothing inside mxbatch imports it (tests/test_layers.py checks)."""

from .spec.plan import *  # noqa: F403
