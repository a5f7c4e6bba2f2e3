"""The drivers' single exception type; the daemon translates it into its own error tree."""

from __future__ import annotations


class DriverFailure(Exception):
    """A sysfs read or write, or a backing-file operation, failed. `path` names what failed."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message
