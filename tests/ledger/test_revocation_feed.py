"""The revocation feed on its own, against the real PostgreSQL: it hears a revocation as it
is notified, and when its listening connection is cut it stops trusting, says so, and listens
again by itself (tests/api/test_auth.py shows the same between two daemons)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, create_engine, text

from poold.ledger.tenants import LISTENER_PREFIX, RETRY_S, REVOKED_CHANNEL, RevocationFeed
from tests.timing import patience, until


@pytest.fixture
def engine(pg_url: str) -> Iterator[Engine]:
    engine = create_engine(pg_url)
    yield engine
    engine.dispose()


def listener(engine: Engine, host: str) -> int | None:
    with engine.connect() as conn:
        pid = conn.execute(text("SELECT pid FROM pg_stat_activity WHERE application_name = :n"),
                           {"n": f"{LISTENER_PREFIX}{host}"}).scalar()
    return None if pid is None else int(pid)


def test_a_cut_feed_stops_trusting_and_listens_again(pg_url: str, engine: Engine) -> None:
    host = f"feed-{uuid.uuid4().hex[:8]}"
    feed = RevocationFeed(pg_url, host)
    revoked: list[str] = []
    resets: list[bool] = []
    feed.subscribe(revoked.append, lambda: resets.append(feed.listening))
    feed.start()
    try:
        until("the feed listens", lambda: feed.listening and listener(engine, host) is not None,
              patience())
        first = listener(engine, host)
        assert resets == [True]  # listening: what was cached before may be stale
        with engine.begin() as conn:
            conn.execute(text("SELECT pg_notify(:c, 'tok-1')"), {"c": REVOKED_CHANNEL})
        until("the revocation is heard", lambda: revoked == ["tok-1"], patience())
        with engine.begin() as conn:
            conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": first})
        until("the feed listens again", lambda: listener(engine, host) not in (None, first),
              patience(RETRY_S[1]))
        until("it trusts again", feed.drain, patience())
        # Dropped (not listening: trust nothing), then listening again (drop the cache again).
        assert resets[:3] == [True, False, True]
        with engine.begin() as conn:
            conn.execute(text("SELECT pg_notify(:c, 'tok-2')"), {"c": REVOKED_CHANNEL})
        until("a revocation is heard on the new connection", lambda: "tok-2" in revoked,
              patience())
    finally:
        feed.stop()
    until("its connection is closed", lambda: listener(engine, host) is None, patience())
