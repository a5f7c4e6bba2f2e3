"""Session retention: which blocks a session holds, and until when.

An agent's turn often stops for a tool call and comes back seconds later wanting the same
prefix. A session holds its blocks for a TTL across that gap; the store turns each hold into one
pin in the eviction policy and drops it when the session ends or its TTL runs out. This table
only does the bookkeeping, with an injected clock; it never pins anything itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field


@dataclass
class _Session:
    deadline: float
    keys: set[bytes] = field(default_factory=set)


class SessionTable:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._sessions: dict[str, _Session] = {}
        self._holders: dict[bytes, set[str]] = {}  # key -> sessions holding it
        # No deadline is earlier than this, so expire() before it is one comparison.
        self.next_deadline = float("inf")

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, session: object) -> bool:
        return session in self._sessions

    def keys_of(self, session: str) -> set[bytes]:
        found = self._sessions.get(session)
        return set(found.keys) if found is not None else set()

    def hold(self, session: str, keys: Iterable[bytes], ttl_s: float) -> list[bytes]:
        """Hold `keys` for `session` and push its deadline to now + ttl_s. Returns the keys
        this session did not hold yet: the caller pins exactly those."""
        entry = self._sessions.get(session)
        deadline = self._clock() + ttl_s
        if entry is None:
            entry = self._sessions[session] = _Session(deadline)
        else:
            entry.deadline = max(entry.deadline, deadline)
        self.next_deadline = min(self.next_deadline, entry.deadline)
        new: list[bytes] = []
        for key in keys:
            if key not in entry.keys:
                entry.keys.add(key)
                self._holders.setdefault(key, set()).add(session)
                new.append(key)
        return new

    def extend(self, session: str, ttl_s: float) -> bool:
        """Push the deadline to now + ttl_s (never earlier); False for an unknown session."""
        entry = self._sessions.get(session)
        if entry is None:
            return False
        entry.deadline = max(entry.deadline, self._clock() + ttl_s)
        return True

    def end(self, session: str) -> list[bytes]:
        """Forget the session; returns the keys it held, for the caller to unpin."""
        entry = self._sessions.pop(session, None)
        if entry is None:
            return []
        for key in entry.keys:
            holders = self._holders.get(key)
            if holders is not None:
                holders.discard(session)
                if not holders:
                    del self._holders[key]
        return list(entry.keys)

    def expire(self) -> list[tuple[str, list[bytes]]]:
        """End every session whose deadline has passed; returns (session, keys) for each."""
        now = self._clock()
        if now < self.next_deadline:
            return []
        # Sessions are few (one per live conversation), so a scan is cheaper than a heap.
        gone = [name for name, entry in self._sessions.items() if entry.deadline <= now]
        ended = [(name, self.end(name)) for name in gone]
        self.next_deadline = min((e.deadline for e in self._sessions.values()),
                                 default=float("inf"))
        return ended

    def forget(self, key: bytes) -> list[str]:
        """The block is gone (lost or removed): no session holds it any more. Returns the
        sessions that did, each of which held one pin the caller must not drop again."""
        sessions = self._holders.pop(key, set())
        for name in sessions:
            self._sessions[name].keys.discard(key)
        return sorted(sessions)
