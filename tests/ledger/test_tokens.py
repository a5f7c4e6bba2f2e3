"""Tokens in the ledger: a revocation is recorded once with its host and the token's name, and
revoking a token that does not exist says which; on both databases. And how a daemon hears of
revocations made through others (PostgreSQL's NOTIFY, `RevocationFeed`): a feed not listening
trusts nothing, a revocation's answer waits for every listener only as long as one has not
heard it, and a feed that cannot connect tries again, backing off, without holding its process
at exit (tests/ledger/test_revocation_feed.py shows a cut connection)."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import create_engine, make_url, text

from poold.errors import InvalidRequest, UnknownToken
from poold.ledger import reads, tenants
from poold.ledger.tenants import (
    HEARD_CHANNEL,
    LISTENER_PREFIX,
    RETRY_S,
    REVOKED_CHANNEL,
    RevocationFeed,
    TenantView,
)
from poold.types import MiB, Role
from tests.conftest import HOST, LedgerFactory
from tests.timing import patience, until

ROOT = Path(__file__).resolve().parents[2]
# A confirm's timeout long enough that answering at once and waiting it out cannot be confused,
# however loaded the machine (only a wrong answer waits it out).
WAIT_OUT_S = 120.0


def test_a_revocation_is_recorded_once_with_its_host_and_the_tokens_name(
        make_ledger: LedgerFactory) -> None:
    ledger = make_ledger()
    token, _bearer = ledger.run(partial(tenants.create_token, name="ci-runner",
                                        role=Role.TENANT, tenant="team-a", actor="admin:a"))
    for _ in range(2):  # idempotent: the second one records nothing
        ledger.run(partial(tenants.revoke_token, token_id=token.id, actor="admin:a"))
    (event,) = ledger.read(lambda s, now: reads.events(s, kind="token.revoked"))
    assert (event.actor, event.host) == ("admin:a", HOST)
    assert event.details == {"token": token.id, "name": "ci-runner"}


def test_a_token_is_made_on_record_with_its_role_and_tenant_and_shown_as_it_is(
        make_ledger: LedgerFactory) -> None:
    """Its creation is audited (who, where, which token, its name, role and tenant); the
    tenant it names exists from then on with the default quotas; what the ledger answers and
    what authentication looks up say the same, and a revoked token reads revoked."""
    ledger = make_ledger(tenant_defaults=(8 * MiB, 5))
    made, bearer = ledger.run(partial(tenants.create_token, name="ci-runner", role=Role.TENANT,
                                      tenant="team-a", actor="admin:a"))
    assert (made.name, made.role, made.tenant, made.created_by, made.revoked_at) == (
        "ci-runner", Role.TENANT, "team-a", "admin:a", None)
    assert made.id in bearer
    (event,) = ledger.read(lambda s, now: reads.events(s, kind="token.created"))
    assert (event.actor, event.host) == ("admin:a", HOST)
    assert event.details == {"token": made.id, "name": "ci-runner", "role": "tenant",
                             "tenant": "team-a"}
    assert ledger.read(lambda s, now: tenants.tenant(s, "team-a", now)) == TenantView(
        name="team-a", max_bytes=8 * MiB, max_leases=5, leased_bytes=0, live_leases=0)
    found = ledger.read(lambda s, _: tenants.lookup(s, made.id))
    assert found is not None
    assert (found.name, found.role, found.tenant, found.revoked) == (
        "ci-runner", Role.TENANT, "team-a", False)
    revoked = ledger.run(partial(tenants.revoke_token, token_id=made.id, actor="admin:a"))
    assert revoked.revoked_at is not None and revoked.tenant == "team-a"
    found = ledger.read(lambda s, _: tenants.lookup(s, made.id))
    assert found is not None and found.revoked
    assert ledger.read(tenants.tokens) == [revoked]


@pytest.mark.parametrize(("role", "tenant"), [(Role.TENANT, None), (Role.ADMIN, "team-a"),
                                              (Role.AGENT, "team-a")])
def test_a_token_names_a_tenant_exactly_when_it_is_a_tenants(
        make_ledger: LedgerFactory, role: Role, tenant: str | None) -> None:
    ledger = make_ledger()
    with pytest.raises(InvalidRequest) as refused:
        ledger.run(partial(tenants.create_token, name="x", role=role, tenant=tenant,
                           actor="admin:a"))
    assert str(refused.value) == (
        "a tenant token names its tenant; admin and agent tokens name none")
    assert ledger.read(tenants.tokens) == []


def test_revoking_an_unknown_token_says_which(make_ledger: LedgerFactory) -> None:
    ledger = make_ledger()
    with pytest.raises(UnknownToken) as refused:
        ledger.run(partial(tenants.revoke_token, token_id="0123456789abcdef", actor="a"))
    assert str(refused.value) == "no token '0123456789abcdef'"


def plain_url(pg_url: str, user: str | None = None) -> str:
    """The URL as libpq takes it (psycopg itself, not SQLAlchemy)."""
    url = make_url(pg_url).set(drivername="postgresql")
    if user is not None:
        url = url.set(username=user)
    return url.render_as_string(hide_password=False)


def notify(pg_url: str, channel: str, payload: str) -> None:
    with psycopg.connect(plain_url(pg_url), autocommit=True) as conn:
        conn.execute("SELECT pg_notify(%s, %s)", (channel, payload))


def own_listener(pg_url: str, host: str) -> int | None:
    with psycopg.connect(plain_url(pg_url), autocommit=True) as conn:
        row = conn.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s",
                           (f"{LISTENER_PREFIX}{host}",)).fetchone()
    return None if row is None else int(row[0])


def backend_alive(pg_url: str, pid: int) -> bool:
    with psycopg.connect(plain_url(pg_url), autocommit=True) as conn:
        return conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s",
                            (pid,)).fetchone() is not None


@pytest.fixture
def feed(pg_url: str) -> Iterator[tuple[RevocationFeed, int]]:
    """A started feed, listening, and the backend pid of its listening connection."""
    host = f"feed-{uuid.uuid4().hex[:8]}"
    started = RevocationFeed(pg_url, host)
    started.start()
    try:
        pid = until("the feed listens", lambda: started.listening and own_listener(pg_url, host),
                    patience())
        yield started, pid
    finally:
        started.stop()


def test_a_feed_never_started_trusts_nothing_and_confirms_at_once(pg_url: str) -> None:
    idle = RevocationFeed(pg_url, "never-started")
    assert not idle.listening
    assert idle.drain() is False  # nothing cached may be trusted
    began = time.monotonic()
    assert idle.confirm("tok", timeout=WAIT_OUT_S) == set()  # nobody to ask: nobody unheard
    assert time.monotonic() - began < WAIT_OUT_S / 2  # answered at once, not at the timeout
    idle.stop()  # stopping what never started is no error


def test_a_stopped_feed_trusts_nothing_and_may_be_stopped_again(
        pg_url: str, feed: tuple[RevocationFeed, int]) -> None:
    stopped, pid = feed
    assert stopped.drain() is True
    stopped.stop()
    assert not stopped.listening and stopped.drain() is False
    stopped.stop()  # a second stop (the daemon's shutdown may come twice) is no error
    until("its connection is closed", lambda: not backend_alive(pg_url, pid), patience())


def test_a_revocation_every_listener_heard_is_confirmed_without_waiting_out_the_timeout(
        pg_url: str, feed: tuple[RevocationFeed, int]) -> None:
    listening, pid = feed
    notify(pg_url, REVOKED_CHANNEL, "tok-heard")
    began = time.monotonic()
    unheard = listening.confirm("tok-heard", timeout=WAIT_OUT_S)
    # Other test runs' daemons may listen on this database too: only one of them that did not
    # hear it may make the answer wait.
    assert pid not in unheard
    assert time.monotonic() - began < WAIT_OUT_S / 2 or unheard
    # A revocation nobody made was heard by nobody, this feed included.
    assert pid in listening.confirm("tok-never-revoked", timeout=0.3)


def test_a_listener_is_waited_for_only_until_it_acknowledged_or_the_timeout(
        pg_url: str, feed: tuple[RevocationFeed, int]) -> None:
    """Another daemon's listener (here a bare connection named as one) that acknowledged a
    revocation before the revoker waits is not waited for; one that never does is named once
    the timeout has passed, and the wait ends then."""
    listening, pid = feed
    with psycopg.connect(plain_url(pg_url), autocommit=True,
                         application_name=f"{LISTENER_PREFIX}other-{uuid.uuid4().hex[:8]}"
                         ) as other:
        other.execute(f"LISTEN {REVOKED_CHANNEL}")
        other_pid = other.info.backend_pid
        other.execute("SELECT pg_notify(%s, 'tok-early')", (HEARD_CHANNEL,))
        # The feed takes it in while idle, before anybody waits for it (what it heard is
        # private: looked at here only to wait for that, instead of sleeping).
        until("the feed heard the early acknowledgement",
              lambda: other_pid in listening._heard_by.get("tok-early", set()), patience())
        notify(pg_url, REVOKED_CHANNEL, "tok-early")
        assert other_pid not in listening.confirm("tok-early", timeout=5)
        notify(pg_url, REVOKED_CHANNEL, "tok-late")  # the other never acknowledges this one
        answers: list[set[int]] = []
        waiting = threading.Thread(
            target=lambda: answers.append(listening.confirm("tok-late", timeout=0.5)),
            daemon=True)
        waiting.start()
        waiting.join(10)
        assert not waiting.is_alive(), "the wait outlived its timeout"
        assert other_pid in answers[0] and pid not in answers[0]


def test_a_feed_that_cannot_connect_tries_again_backing_off_until_it_listens(
        pg_url: str, caplog: pytest.LogCaptureFixture) -> None:
    role = f"feed_{uuid.uuid4().hex[:8]}"  # refused until it exists
    admin = create_engine(plain_url(pg_url).replace("postgresql://", "postgresql+psycopg://"))
    host = f"feed-{uuid.uuid4().hex[:8]}"
    waiting = RevocationFeed(plain_url(pg_url, user=role), host)
    caplog.set_level(logging.WARNING, logger=tenants.__name__)
    waiting.start()
    try:
        def tries() -> list[logging.LogRecord]:
            return [r for r in caplog.records
                    if r.getMessage().startswith("auth.revocations_unheard")]
        first, _second, third = until("three tries", lambda: tries()[:3] if len(tries()) >= 3
                                      else None, patience(RETRY_S[0] * 7))
        # Retries RETRY_S[0] apart, then twice that, and so on: the third try comes at least
        # 0.1 + 0.2 s after the first (a load can only make it later), never a flood.
        assert third.created - first.created >= 3 * RETRY_S[0]
        assert not waiting.listening and waiting.drain() is False
        with admin.begin() as conn:
            conn.execute(text(f"CREATE ROLE {role} LOGIN"))
        until("the feed listens once it may", lambda: waiting.listening, patience(RETRY_S[1]))
        assert own_listener(pg_url, host) is not None
    finally:
        waiting.stop()
        with admin.begin() as conn:
            conn.execute(text(f"DROP ROLE IF EXISTS {role}"))
        admin.dispose()


def test_a_listening_feed_does_not_hold_its_process_at_exit(pg_url: str) -> None:
    """The daemon may exit without stopping its feed (a crash of its main loop); the feed's
    thread, named for a thread dump, does not keep the process alive."""
    script = (
        "import sys, threading, time\n"
        "from poold.ledger.tenants import RevocationFeed\n"
        "feed = RevocationFeed(sys.argv[1], 'exiting')\n"
        "feed.start()\n"
        "deadline = time.monotonic() + 30\n"
        "while not feed.listening and time.monotonic() < deadline:\n"
        "    time.sleep(0.05)\n"
        "print(feed.listening, sorted(t.name for t in threading.enumerate()))\n"
    )
    done = subprocess.run([sys.executable, "-c", script, pg_url], cwd=ROOT, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True ['MainThread', 'revocations']"
