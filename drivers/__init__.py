"""Kernel- and file-facing code: turns what the machine has into typed, frozen snapshots.

A library: imports nothing from poold or api (enforced by import-linter). Foreign errors (OSError)
are wrapped into `DriverFailure`, naming the path involved.
"""

from drivers.errors import DriverFailure

__all__ = ["DriverFailure"]
