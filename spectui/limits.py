"""Bounds shared by the engine, the CLI, the catalog and the UI: one definition each."""

MAX_DRAFT = 16
"""The most tokens one speculative cycle may propose (K's upper bound; `auto` stays within it)."""
