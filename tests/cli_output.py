"""What the command line printed, read as the tests need it: its one error line."""

from __future__ import annotations


def one_error_line(stderr: str) -> str:
    """The CLI's error is exactly one `spectui: ...` line, with no traceback around it."""
    assert "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if line.startswith("spectui: ")]
    assert len(errors) == 1
    return errors[0]
