"""The composition root: builds every object of a running daemon and its background tasks."""

from poold.daemon.app import Daemon

__all__ = ["Daemon"]
