"""Reading sysfs under an injectable root, the way ndctl's libraries do.

Attributes are small text files. A missing optional attribute is None (kernels differ in what they
expose); an attribute that exists but cannot be read or parsed is a DriverFailure naming its path,
so a garbage value is never silently taken for "absent".
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from drivers.errors import DriverFailure, KernelRefused

_NOT_APPLICABLE = {errno.ENXIO, errno.ENODEV}

# The largest value any sysfs integer we read may hold (sizes and addresses are u64).
_U64_MAX = 2**64 - 1


class Sysfs:
    """A sysfs tree: the live /sys, or a recorded copy of it for tests."""

    def __init__(self, root: Path | str = "/sys") -> None:
        self.root = Path(root)

    def path(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    def devices(self, bus: str) -> list[Path]:
        """Resolved device directories of a bus (`/sys/bus/<bus>/devices/*`), sorted by name."""
        directory = self.path("bus", bus, "devices")
        try:
            names = sorted(os.listdir(directory))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise DriverFailure(str(directory), f"cannot list: {exc.strerror}") from exc
        return [self.resolve(directory / name) for name in names]

    def resolve(self, path: Path) -> Path:
        """Follow symlinks inside the tree (recorded trees keep the kernel's relative links)."""
        try:
            return path.resolve(strict=True)
        except (OSError, RuntimeError) as exc:
            raise DriverFailure(str(path), f"dangling link: {exc}") from exc

    def write(self, path: Path, value: str, device: str) -> None:
        """Write one attribute (the only way the drivers change the kernel; tests replace it with
        a fake kernel that reacts to writes)."""
        write_text(path, value, device)

    def relative(self, path: Path) -> str:
        """The kernel's path of a resolved directory below devices/, as daxctl prints it."""
        devices = self.resolve(self.path("devices"))
        return "/" + str(path.relative_to(devices))


def read_text(path: Path) -> str | None:
    """An attribute's value without the trailing newline; None when the attribute is absent."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(65536)
    except FileNotFoundError:
        return None
    except IsADirectoryError as exc:
        raise DriverFailure(str(path), "is a directory, not an attribute") from exc
    except OSError as exc:
        if exc.errno in _NOT_APPLICABLE:
            # The kernel answers ENXIO/ENODEV for attributes that do not apply to the object's
            # current state (an unconfigured namespace's resource, an idle seed's size).
            return None
        raise DriverFailure(str(path), f"cannot read: {exc.strerror}") from exc
    try:
        return raw.decode("ascii").strip()
    except UnicodeDecodeError as exc:
        raise DriverFailure(str(path), "not text") from exc


def write_text(path: Path, value: str, device: str) -> None:
    """One write(2) of `value` to an attribute, as the kernel wants it; a refusal becomes a
    KernelRefused naming the device, the path and the kernel's errno."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)  # O_TRUNC: ignored by sysfs, needed by fakes
    except OSError as exc:
        raise KernelRefused(device, str(path), exc.errno or 0,
                            f"cannot open for writing: {exc.strerror}") from exc
    try:
        os.write(fd, value.encode("ascii"))
    except OSError as exc:
        raise KernelRefused(device, str(path), exc.errno or 0,
                            f"writing {value!r} refused: {exc.strerror}") from exc
    finally:
        os.close(fd)


def read_int(path: Path, *, base: int = 0) -> int | None:
    """An integer attribute: decimal, or hex with 0x (sizes, addresses), or `base` when given."""
    text = read_text(path)
    if not text:  # absent, or empty: the kernel's "not set" (an unused namespace's resource)
        return None
    try:
        value = int(text, base)
    except ValueError as exc:
        raise DriverFailure(str(path), f"not an integer: {text[:40]!r}") from exc
    if not -(2**63) <= value <= _U64_MAX:
        raise DriverFailure(str(path), f"out of range: {text[:40]!r}")
    return value


def read_node(path: Path) -> int | None:
    """A NUMA node attribute: -1 (no node) reads as None."""
    value = read_int(path, base=10)
    return None if value is None or value < 0 else value


def link_name(path: Path) -> str | None:
    """The basename a symlink points to (a driver, a host device); None when there is no link."""
    try:
        return os.path.basename(os.readlink(path))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DriverFailure(str(path), f"cannot read link: {exc.strerror}") from exc


def children(path: Path, prefix: str) -> list[Path]:
    """Entries named prefix<N> or prefix<N.M>, in numeric order (dax0.2 before dax0.10).

    `namespace_seed` is not a namespace and `mapping` is not `mapping0`: the rest must be a number.
    """
    try:
        names = [n for n in os.listdir(path)
                 if n.startswith(prefix) and n[len(prefix):].replace(".", "").isdigit()]
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise DriverFailure(str(path), f"cannot list: {exc.strerror}") from exc
    return [path / n for n in sorted(names, key=natural_key)]


def natural_key(name: str) -> tuple[object, ...]:
    """Sort key that orders embedded numbers numerically: mem2 < mem10, dax0.2 < dax0.10."""
    parts: list[object] = []
    number = ""
    text = ""
    for char in name:
        if char.isdigit():
            if text:
                parts.append(text)
                text = ""
            number += char
        else:
            if number:
                parts.append(int(number))
                number = ""
            text += char
    if number:
        parts.append(int(number))
    if text:
        parts.append(text)
    return tuple((0, p) if isinstance(p, int) else (1, p) for p in parts)
