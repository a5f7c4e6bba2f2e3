"""The revocation feed on its own, against the real PostgreSQL: it hears a revocation as it
is notified, and when its listening connection is cut it stops trusting, says so, and listens
again by itself (tests/api/test_auth.py shows the same between two daemons)."""

from __future__ import annotations

import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, create_engine, make_url, text

from poold.ledger import tenants
from poold.ledger.tenants import LISTENER_PREFIX, RETRY_S, REVOKED_CHANNEL, RevocationFeed
from tests.multihost.tcp_proxy import TcpProxy
from tests.timing import patience, until


@pytest.fixture
def engine(pg_url: str) -> Iterator[Engine]:
    engine = create_engine(pg_url)
    yield engine
    engine.dispose()


@pytest.fixture
def quiet_db(pg_url: str) -> Iterator[str]:
    """A database of this test's own: notifications are per database, so no other test's
    daemons (mutation testing runs several at once) can wake a wait this test means to see
    end at its timeout."""
    name, server = f"t_{uuid.uuid4().hex[:12]}", pg_url.split("?")[0]  # no schema options
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    try:
        yield make_url(server).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE {name} WITH (FORCE)"))
        admin.dispose()


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


def test_a_revocation_is_confirmed_once_every_listener_heard_it(pg_url: str, engine: Engine
                                                                ) -> None:
    """The revoking daemon's wait: every listening feed acknowledges what it heard, so confirm
    answers at once with nobody left; a listener that never acknowledges is named after the
    timeout, and only it."""
    hosts = [f"feed-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    feeds = [RevocationFeed(pg_url, host) for host in hosts]
    for feed in feeds:
        feed.start()
    deaf = psycopg.connect(make_url(pg_url).set(drivername="postgresql").render_as_string(
        hide_password=False).split("?")[0], autocommit=True,
        application_name=f"{LISTENER_PREFIX}deaf-{uuid.uuid4().hex[:8]}")
    try:
        until("the feeds listen", lambda: all(listener(engine, h) for h in hosts), patience())
        pids = {listener(engine, h) for h in hosts}
        with engine.begin() as conn:
            conn.execute(text("SELECT pg_notify(:c, 'tok-heard')"), {"c": REVOKED_CHANNEL})
        # Other test runs' daemons may listen on this database too: only ours are judged.
        unheard = feeds[0].confirm("tok-heard", timeout=10)
        assert unheard.isdisjoint(pids)  # both feeds heard it, the confirming one too
        deaf.execute(f"LISTEN {REVOKED_CHANNEL}")  # a listener that never says it heard
        with engine.begin() as conn:
            conn.execute(text("SELECT pg_notify(:c, 'tok-unheard')"), {"c": REVOKED_CHANNEL})
        unheard = feeds[0].confirm("tok-unheard", timeout=0.5)
        assert deaf.info.backend_pid in unheard and unheard.isdisjoint(pids)
        # A wait whose deadline passed before its first look (a stalled thread) still looks:
        # running out of time is no confirmation.
        assert deaf.info.backend_pid in feeds[0].confirm("tok-never-sent", timeout=0)
    finally:
        deaf.close()
        for feed in feeds:
            feed.stop()


def test_acknowledgements_nobody_waits_for_are_kept_only_so_many(
        pg_url: str, engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every feed hears every daemon's acknowledgements; those of revocations nobody here
    waits for are dropped oldest first past a bound (1024; 4 here), and the feed goes on."""
    monkeypatch.setattr(tenants, "_HEARD_KEPT", 4)
    host = f"feed-{uuid.uuid4().hex[:8]}"
    feed = RevocationFeed(pg_url, host)
    feed.start()
    try:
        until("the feed listens", lambda: listener(engine, host) is not None, patience())
        with engine.begin() as conn:
            conn.execute(text("SELECT pg_notify(:c, 'old-' || g) FROM generate_series(1, 10) g"),
                         {"c": tenants.HEARD_CHANNEL})
        until("the feed took them in", lambda: "old-10" in feed._heard_by, patience())
        assert len(feed._heard_by) == 4 and feed.listening
        with engine.begin() as conn:
            conn.execute(text("SELECT pg_notify(:c, 'fresh')"), {"c": REVOKED_CHANNEL})
        assert listener(engine, host) not in feed.confirm("fresh", timeout=10)
    finally:
        feed.stop()


def test_a_feed_waits_less_the_sooner_the_server_is_back_and_starts_over_after_listening(
        pg_url: str, engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """While the server refuses, attempts to listen back off from the shortest wait; once it
    listened, the next outage starts again from the shortest wait. With waits from 0.05 s to
    60 s, a feed that waited the longest (or never started over) would still be waiting."""
    monkeypatch.setattr(tenants, "RETRY_S", (0.05, 60.0))
    host = f"feed-{uuid.uuid4().hex[:8]}"
    with TcpProxy("127.0.0.1", make_url(pg_url).port or 5432) as proxy:
        proxy.refuse()
        feed = RevocationFeed(proxy.url_for(pg_url), host)
        feed.start()
        try:
            for outage in range(2):
                refused = proxy.refused
                until(f"outage {outage}: three attempts refused",
                      lambda seen=refused: proxy.refused >= seen + 3, patience())
                assert not feed.listening and not feed.drain()
                proxy.heal()
                until(f"outage {outage}: the feed listens", lambda: feed.listening, patience())
                assert feed.drain()
                proxy.refuse()  # the next outage cuts the connection it listens on
        finally:
            feed.stop()


def test_each_drain_says_whether_the_feed_still_listens(pg_url: str, engine: Engine) -> None:
    """A request's drain is what finds a cut connection when no listening thread runs (here:
    the thread's one step of listening, alone): that drain already answers False, not only the
    ones after it."""
    host = f"feed-{uuid.uuid4().hex[:8]}"
    feed = RevocationFeed(pg_url, host)
    resets: list[bool] = []
    feed.subscribe(lambda _id: None, lambda: resets.append(feed.listening))
    feed._listen()  # what the listening thread does first
    try:
        assert feed.listening and feed.drain() and resets == [True]
        with engine.begin() as conn:
            conn.execute(text("SELECT pg_terminate_backend(:pid)"),
                         {"pid": listener(engine, host)})

        def cut() -> bool:
            heard = feed.drain()
            assert heard == feed.listening, "a drain answered for a connection it dropped"
            return not heard

        until("a drain finds the connection cut", cut, patience())
        assert resets == [True, False]
    finally:
        if feed._conn is not None:
            feed._conn.close()


@contextmanager
def revoked_before_two_listeners(db: str, token: str
                                 ) -> Iterator[tuple[RevocationFeed, psycopg.Connection[Any]]]:
    """A feed of its own on `db` and a bare second listener (which acknowledges only what the
    test sends for it), once `token`'s revocation was sent to both."""
    host = f"feed-{uuid.uuid4().hex[:8]}"
    feed = RevocationFeed(db, host)
    feed.start()
    other = psycopg.connect(make_url(db).set(drivername="postgresql").render_as_string(
        hide_password=False), autocommit=True,
        application_name=f"{LISTENER_PREFIX}other-{uuid.uuid4().hex[:8]}")
    engine = create_engine(db)
    try:
        until("the feed listens", lambda: listener(engine, host) is not None, patience())
        other.execute(f"LISTEN {REVOKED_CHANNEL}")
        with engine.begin() as conn:
            conn.execute(text("SELECT pg_notify(:c, :t)"), {"c": REVOKED_CHANNEL, "t": token})
        yield feed, other
    finally:
        other.close()
        feed.stop()
        engine.dispose()


def test_a_confirm_ends_at_its_timeout_when_nothing_more_arrives(quiet_db: str) -> None:
    """One feed and one listener that never acknowledges: after the feed's own acknowledgement
    nothing arrives to wake the wait, and confirm still answers at its timeout."""
    answer: list[set[int]] = []
    with revoked_before_two_listeners(quiet_db, "tok-alone") as (feed, deaf):
        waiter = threading.Thread(target=lambda: answer.append(feed.confirm("tok-alone", 0.5)),
                                  daemon=True)
        waiter.start()
        waiter.join(patience(0.5))
        assert answer and deaf.info.backend_pid in answer[0]


def test_a_confirm_waits_for_a_listener_that_acknowledges_late(quiet_db: str) -> None:
    """A listener slow to acknowledge (its daemon busy) is waited for, not named at confirm's
    first look: it acknowledges a moment after confirm began, well inside the timeout."""
    with revoked_before_two_listeners(quiet_db, "tok-late") as (feed, slow):
        late = threading.Timer(0.3, lambda: slow.execute(
            "SELECT pg_notify(%s, 'tok-late')", (tenants.HEARD_CHANNEL,)))
        late.start()
        unheard = feed.confirm("tok-late", timeout=patience(5))
        late.join()
        assert not unheard  # the feed itself and the slow one both heard it


def test_the_listening_connection_carries_the_urls_password_and_keepalives(
        pg_url: str, engine: Engine) -> None:
    """The listener logs in as the ledger does (its password too: this test database trusts
    any) and finds a dead server by TCP keepalive, not by a request hanging."""
    host = f"feed-{uuid.uuid4().hex[:8]}"
    feed = RevocationFeed(make_url(pg_url).set(password="s3cret").render_as_string(
        hide_password=False), host)
    feed.start()
    try:
        until("the feed listens", lambda: feed.listening, patience())
        conn = feed._conn
        assert conn is not None
        assert conn.info.password == "s3cret"
        settings = conn.info.get_parameters()
        assert settings["keepalives_idle"] == "4" and settings["connect_timeout"] == "5"
    finally:
        feed.stop()


def test_a_feed_left_running_does_not_keep_its_process_alive(pg_url: str) -> None:
    """A daemon that exits without stopping the feed (a crash path) is not held up by the
    listening thread."""
    script = ("import sys, time\n"
              "from poold.ledger.tenants import RevocationFeed\n"
              "feed = RevocationFeed(sys.argv[1], 'left-running')\n"
              "feed.start()\n"
              "while not feed.listening:\n"
              "    time.sleep(0.05)\n"
              "print('listening', flush=True)\n")
    done = subprocess.run([sys.executable, "-c", script, pg_url], capture_output=True,
                          text=True, timeout=patience(), check=True)
    assert done.stdout == "listening\n"
    # Why: its listening thread is a daemon thread, which the interpreter does not wait for
    # at exit (checked here too, in this process, where mutation testing sees the call).
    feed = RevocationFeed(pg_url, "in-process")
    feed.start()
    try:
        daemons = [t.daemon for t in threading.enumerate() if t.name == "revocations"]
        assert daemons and all(daemons)
    finally:
        feed.stop()
