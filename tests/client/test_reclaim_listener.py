"""A session against a fake client at the SessionClient seam (the daemon's side is
tests/client/test_sessions.py): its reclaim listener long-polls the session's reclaim feed,
hands each ask over once, and goes on listening after a failed poll instead of stopping; its
leases are granted with what the caller asked, in the session; closing it ends its threads and
its leases, once."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from api.schemas import ClientSession, GrantedLease, ReclaimAsk
from poold import errors
from poold.client import session as session_module
from poold.client.session import RECLAIM_POLL_S, Session
from poold.types import LeaseState, SessionState
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
        self.closes = self.keepalives = 0
        self.granted: list[dict[str, Any]] = []
        self.during_grant: Callable[[], None] | None = None
        self.asks_in_keepalive: list[ReclaimAsk] = []

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
        self.closes += 1
        return info(SessionState.CLOSED)

    def keepalive_session(self, session_id: str, idle_s: object = None) -> ClientSession:
        self.keepalives += 1
        return info().model_copy(update={"reclaim": self.asks_in_keepalive})

    def grant(self, size: int, **asked: Any) -> GrantedLease:
        self.granted.append(asked)
        if self.during_grant is not None:
            self.during_grant()
        return GrantedLease(
            id=f"{len(self.granted):032x}", pool=asked["pool"] or "default", host="h",
            tenant=None, device="dax0.0",
            device_id=1, chardev="/dev/dax0.0", offset=0, length=size, align=2 << 20,
            generation=1, ttl_s=30, granted_at=NOW, expires_at=NOW, ended_at=None,
            state=LeaseState.ACTIVE, labels=asked["labels"] or {}, idempotency_key=None,
            scrubbed_bytes=0, kind="devdax", map_path=None, map_offset=0,
            session_id=asked["session_id"], elastic=asked["elastic"], token="t0ken")

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
    (listener,) = [t for t in threading.enumerate() if t.name == f"poold-reclaim-{session.id[:8]}"]
    assert listener.daemon  # it never holds the process at exit
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


def test_a_lease_is_granted_in_the_session_with_what_the_caller_asked() -> None:
    client = FeedClient()
    session = Session(client, info(), keepalive=False)  # type: ignore[arg-type]
    lease = session.lease(4 << 20, pool="kv", labels={"engine": "x"}, idempotency_key="k-1",
                          wait_s=2.5)
    plain = session.lease(2 << 20)
    assert client.granted == [
        {"pool": "kv", "labels": {"engine": "x"}, "idempotency_key": "k-1",
         "session_id": session.id, "elastic": False, "wait_s": 2.5},
        {"pool": None, "labels": None, "idempotency_key": None, "session_id": session.id,
         "elastic": False, "wait_s": 0}]  # a grant waits for room only when asked to
    assert lease.token == "t0ken"  # what receiving its descriptor needs
    assert session.leases == [lease, plain]
    session.close()


def test_an_elastic_lease_without_on_reclaim_is_refused_saying_why() -> None:
    client = FeedClient()
    session = Session(client, info(), keepalive=False)  # type: ignore[arg-type]
    with pytest.raises(errors.ClientError) as refused:
        session.lease(2 << 20, elastic=True)
    assert str(refused.value) == ("an elastic lease needs a session with on_reclaim: nothing "
                                  "would give it back when asked")
    assert client.granted == []


def test_a_lease_granted_while_its_session_was_being_lost_is_lost_too() -> None:
    client = FeedClient()
    session = Session(client, info(), keepalive=False)  # type: ignore[arg-type]
    client.during_grant = lambda: session._lose("SessionExpired: expired")
    lease = session.lease(2 << 20)
    assert lease.lost_reason == "session lost: SessionExpired: expired"


def test_closing_ends_the_renewals_and_the_leases_and_asks_the_daemon_once() -> None:
    client = FeedClient()
    session = Session(client, info().model_copy(update={"ttl_s": 3}),  # type: ignore[arg-type]
                      keepalive=True)
    renewing = f"poold-session-{session.id[:8]}"
    until("a renewal", lambda: client.keepalives >= 1, patience(1))
    assert renewing in {t.name for t in threading.enumerate()}
    lease = session.lease(2 << 20)
    session.close()
    assert lease.lost_reason == "session closed"
    until("the renewals end", lambda: renewing not in {t.name for t in threading.enumerate()},
          patience(1))
    session.close()
    assert client.closes == 1


def test_asks_in_a_keepalives_answer_are_handed_over_too() -> None:
    """The long poll may be away (here: held open with nothing); the keepalive's answer carries
    the session's pending asks as well, and they reach on_reclaim from there."""
    client = FeedClient()
    client.asks_in_keepalive = [ASK]
    heard: list[list[str]] = []
    session = Session(client, info().model_copy(update={"ttl_s": 3}),  # type: ignore[arg-type]
                      keepalive=True, on_reclaim=lambda asks: heard.append([a.lease for a in asks]))
    until("the ask from the keepalive's answer", lambda: heard, patience(1))
    session.close()
    assert heard == [["l1"]]
