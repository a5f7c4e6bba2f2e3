"""A session's reclaim listener against a fake client at the SessionClient seam (the daemon's
side is tests/client/test_sessions.py): it long-polls the session's reclaim feed, hands each
ask over once, and goes on listening after a failed poll instead of stopping."""

from __future__ import annotations

import threading
from collections import deque
from datetime import UTC, datetime
from typing import Any

import pytest

from api.schemas import ClientSession, ReclaimAsk
from poold import errors
from poold.client import session as session_module
from poold.client.session import RECLAIM_POLL_S, Session
from poold.types import SessionState
from tests.timing import patience, until

NOW = datetime(2026, 1, 1, tzinfo=UTC)
ASK = ReclaimAsk(lease="l1", length=2 << 20, by=NOW)


class FeedClient:
    """Answers the listener's polls from a script (an exception is raised), then holds the
    next poll open until the session is closed, as a long poll with nothing to say."""

    fd_socket = None

    def __init__(self, *answers: list[ReclaimAsk] | Exception) -> None:
        self.answers: deque[list[ReclaimAsk] | Exception] = deque(answers)
        self.waits: list[float] = []
        self.closed = threading.Event()

    def session_reclaims(self, session_id: str, wait_s: float = 0) -> list[ReclaimAsk]:
        self.waits.append(wait_s)
        if self.answers:
            answer = self.answers.popleft()
            if isinstance(answer, Exception):
                raise answer
            return answer
        self.closed.wait(patience(1))
        raise errors.ClientError("the client was closed")

    def close_session(self, session_id: str) -> ClientSession:
        self.closed.set()
        return info(SessionState.CLOSED)

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the listener does not call {name}")


def info(state: SessionState = SessionState.ACTIVE) -> ClientSession:
    return ClientSession(id="s" * 32, host="h", tenant=None, ttl_s=30, opened_at=NOW,
                         expires_at=NOW, ended_at=None, state=state, labels={}, leases=[])


def listen(client: FeedClient) -> tuple[Session, list[list[str]]]:
    heard: list[list[str]] = []
    made = Session(client, info(), keepalive=False,  # type: ignore[arg-type]
                   on_reclaim=lambda asks: heard.append([a.lease for a in asks]))
    return made, heard


def test_the_listener_long_polls_and_hands_each_ask_over_once() -> None:
    client = FeedClient([ASK], [ASK])
    session, heard = listen(client)
    until("the second poll", lambda: len(client.waits) >= 3, patience(1))
    session.close()
    assert heard == [["l1"]]
    assert set(client.waits) == {RECLAIM_POLL_S}  # long polls, never a busy loop


def test_a_failed_poll_is_tried_again_after_a_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session_module, "RETRY_S", 0.01)
    client = FeedClient(errors.TransportError("daemon restarting"), [ASK])
    session, heard = listen(client)
    until("the ask after the failed poll", lambda: heard, patience(1))
    session.close()
    assert heard == [["l1"]]


def test_a_closed_client_ends_the_listening() -> None:
    client = FeedClient(errors.ClientError("GET /v1/sessions/x/reclaims: the client is closed"))
    session, heard = listen(client)
    name = f"poold-reclaim-{session.id[:8]}"
    until("the listener ends", lambda: name not in {t.name for t in threading.enumerate()},
          patience(1))
    assert client.waits == [RECLAIM_POLL_S] and heard == []
    session.close()
