"""The same real daemon (emulated 64 MiB device, per module) and client per test as poold.kv's
tests: an integration sits on poold.kv, and each test must give back every lease it took."""

from tests.kv.conftest import client, daemon_url

__all__ = ["client", "daemon_url"]
