"""`python tests/run_with_fault.py ARGS...`: `spectui ARGS...` with the fault the environment plans.

The test that runs it sets SPECTUI_TEST_FAULT (see fault_points.Plan); the command itself is the
real one, in its own process, so its exit code, its output and its handling of signals (a SIGBUS
from a truncated model file) are what a user would get. The injector prints `fault fired: WHERE`
on stderr when the fault happens, so a test can tell a fault that fired from one that never came.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fault_points

from spectui.cli import main

if __name__ == "__main__":
    plan = fault_points.Plan.from_env()
    if plan is not None:
        fault_points.install(plan)
    sys.exit(main(sys.argv[1:]))
