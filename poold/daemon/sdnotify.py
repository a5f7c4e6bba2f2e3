"""sd_notify(3) without libsystemd: tell systemd we are ready, alive, or stopping.

Owns the datagrams to $NOTIFY_SOCKET (READY=1, WATCHDOG=1, STOPPING=1, STATUS=...) and the
guarded watchdog loop that pings only while the daemon is healthy. It decides nothing about
health itself: the composition root hands it a probe.

Also the file descriptor store's two halves: FDSTORE=1 datagrams carrying descriptors
(`notify_fds`), and the descriptors systemd hands back at the next start (`listen_fds`).

Besides poold.config, this is the one module that reads the environment, and only systemd's
service protocol variables: NOTIFY_SOCKET, WATCHDOG_USEC (and WATCHDOG_PID, which says which
process the watchdog is for), LISTEN_FDS, LISTEN_PID, LISTEN_FDNAMES and FDSTORE. They describe
how this process was started, not how poold is configured, so they do not belong in Settings.
When NOTIFY_SOCKET is unset (not under systemd, or Type= is not notify) every call is a no-op.
"""

from __future__ import annotations

import array
import asyncio
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Mapping

log = logging.getLogger(__name__)


class Notifier:
    def __init__(self, address: str | None, watchdog_usec: int | None = None) -> None:
        # A leading '@' names a socket in the abstract namespace (a NUL byte on the wire).
        self.address = "\0" + address[1:] if address and address.startswith("@") else address
        self.watchdog_usec = watchdog_usec
        self._sock: socket.socket | None = None
        self._warned = False

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Notifier:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET") or None
        if address is not None and not address.startswith(("/", "@")):
            log.warning("sdnotify.unsupported address=%s; not notifying", address)  # vsock:...
            address = None
        return cls(address, _watchdog_usec(env))

    @property
    def enabled(self) -> bool:
        return self.address is not None

    @property
    def watchdog_period_s(self) -> float | None:
        """Seconds between WATCHDOG=1 pings: half of WatchdogSec, as sd_watchdog_enabled(3) says."""
        if self.address is None or not self.watchdog_usec:
            return None
        return self.watchdog_usec / 2 / 1_000_000

    def notify(self, *assignments: str) -> bool:
        """Send `KEY=value` lines in one datagram; False if not sent (logged once, never raised:
        losing systemd's ear must not take the daemon down)."""
        if self.address is None:
            return False
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto("\n".join(assignments).encode(), self.address)
        except OSError as exc:
            if not self._warned:
                log.warning("sdnotify.failed address=%s error=%r", self.address, exc)
                self._warned = True
            return False
        return True

    def notify_fds(self, assignments: list[str], fds: list[int]) -> bool:
        """Like `notify`, with descriptors attached (SCM_RIGHTS): FDSTORE=1."""
        if self.address is None:
            return False
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            # sendmsg itself: socket.send_fds ignores its address (CPython 3.11).
            rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
            self._sock.sendmsg(["\n".join(assignments).encode()], rights, 0, self.address)
        except OSError as exc:
            log.warning("sdnotify.failed address=%s error=%r", self.address, exc)
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        return self.notify("READY=1", *([f"STATUS={status}"] if status else []))

    def stopping(self) -> bool:
        return self.notify("STOPPING=1", "STATUS=stopping")

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


LISTEN_FDS_START = 3  # SD_LISTEN_FDS_START


def fdstore_offered(environ: Mapping[str, str] | None = None) -> bool:
    """Whether systemd says it keeps a file descriptor store for this service ($FDSTORE, the
    store's size, set by systemd 254 and later; older ones say nothing, so the unit names the
    store in POOLD_FD_STORE instead)."""
    env = os.environ if environ is None else environ
    try:
        return int(env.get("FDSTORE", "0")) > 0 and bool(env.get("NOTIFY_SOCKET"))
    except ValueError:
        return False


def listen_fds(environ: Mapping[str, str] | None = None) -> dict[str, int]:
    """The descriptors systemd passed this process at start (sd_listen_fds_with_names(3)): name ->
    fd, made close-on-exec. The variables are removed from os.environ, as sd_listen_fds(3) does,
    so no child thinks they are its own. Empty when they are absent or meant for another pid."""
    env = os.environ if environ is None else environ
    try:
        count = int(env.get("LISTEN_FDS", "0"))
        pid = int(env.get("LISTEN_PID", "0"))
    except ValueError:
        return {}
    names = env.get("LISTEN_FDNAMES", "").split(":")
    if environ is None:
        for key in ("LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES"):
            os.environ.pop(key, None)
    if count <= 0 or pid != os.getpid():
        return {}
    found = {}
    for index in range(count):
        fd = LISTEN_FDS_START + index
        os.set_inheritable(fd, False)
        name = names[index] if index < len(names) and names[index] else f"unknown-{fd}"
        found[name] = fd
    return found


def _watchdog_usec(env: Mapping[str, str]) -> int | None:
    try:
        usec = int(env.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    pid = env.get("WATCHDOG_PID")
    if pid and pid != str(os.getpid()):
        return None  # the watchdog is some other process's (we were started by a wrapper)
    return usec if usec > 0 else None


Probe = Callable[[], Awaitable[str | None]]


async def keep_watchdog(notifier: Notifier, period_s: float, problem: Probe) -> None:
    """Send WATCHDOG=1 every `period_s` while `problem()` finds nothing wrong.

    A daemon whose ledger stops answering stops pinging, so systemd restarts it after WatchdogSec;
    the loop itself never dies of a failing probe (a probe that raises counts as unhealthy).
    """
    loop = asyncio.get_running_loop()
    withheld = False
    while True:
        started = loop.time()
        try:
            reason = await problem()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("watchdog.probe_failed")
            reason = f"probe failed: {exc!r}"
        if reason is None:
            notifier.watchdog()
            if withheld:
                log.info("watchdog.resumed")
                withheld = False
        elif not withheld:
            log.error("watchdog.withheld reason=%s", reason)
            withheld = True
        await asyncio.sleep(max(0.0, period_s - (loop.time() - started)))
