"""Drafters: every way of proposing the tokens the target then verifies."""
