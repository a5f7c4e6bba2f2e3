"""The drivers' exception types; the daemon translates them into its own error tree."""

from __future__ import annotations

import errno as errnos
import os


class DriverFailure(Exception):
    """A sysfs read or write, or a backing-file operation, failed. `path` names what failed."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


class KernelRefused(DriverFailure):
    """A change the kernel refused (a sysfs write failed), or one the drivers refused before
    writing anything because the kernel would have: `device` names the object (dax0.1,
    memory33), `errno` is the kernel's answer (EBUSY, ENOSPC, EINVAL...)."""

    def __init__(self, device: str, path: str, errno: int, message: str) -> None:
        super().__init__(path, f"{device}: {message} [{errno_name(errno)}]")
        self.device = device
        self.errno = errno


def errno_name(code: int) -> str:
    """ENOSPC (No space left on device)."""
    return f"{errnos.errorcode.get(code, f'errno {code}')} ({os.strerror(code)})"
