"""`fsck` finds a ledger written by real grants, releases, revokes and expiries clean, and reports
each corruption that raw SQL can make of it; `poold fsck` prints that report as JSON and exits 1
on a violation.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta
from functools import partial

import pytest
from sqlalchemy import Connection, delete, insert, literal, select, text, update

from poold import db
from poold.cli.main import main
from poold.ledger import leases, sessions
from poold.ledger.clock import ManualClock
from poold.ledger.fsck import FsckReport, fsck
from poold.ledger.leases import GrantRequest
from poold.ledger.ledger import Ledger
from poold.ledger.views import LeaseView
from poold.models import Claim, ClientSession, Event, Host, Lease
from poold.types import DeviceKind, EventKind, MiB
from tests.conftest import LedgerFactory, emulated_spec


def grant(ledger: Ledger, size: int, ttl_s: int = 600) -> LeaseView:
    return ledger.run(partial(leases.grant, request=GrantRequest(size, "test", ttl_s=ttl_s)))


def end(ledger: Ledger, command: Callable[..., LeaseView], lease: LeaseView) -> None:
    ledger.run(partial(command, lease_id=lease.id, actor="test"))


def check(ledger: Ledger) -> FsckReport:
    return ledger.read(fsck)


@contextmanager
def raw(ledger: Ledger) -> Iterator[Connection]:
    """A transaction on the ledger's database that bypasses poold entirely."""
    engine = db.make_engine(ledger.url, writer=True)
    try:
        with engine.begin() as conn:
            yield conn
    finally:
        engine.dispose()


@pytest.fixture
def sliced(make_ledger: LedgerFactory) -> Ledger:
    """A 64 MiB device (2 MiB align) claimed in 16 MiB slices."""
    return make_ledger([emulated_spec(64 * MiB)], claim_slice=16 * MiB)


def test_real_traffic_leaves_a_clean_ledger(sliced: Ledger, clock: ManualClock) -> None:
    granted = [grant(sliced, 6 * MiB) for _ in range(6)]
    grant(sliced, 2 * MiB, ttl_s=5)  # expires, and the reaper finalises it
    end(sliced, leases.release, granted[0])
    end(sliced, leases.release, granted[0])  # idempotent, no second event
    end(sliced, leases.revoke, granted[3])
    clock.advance(10)
    assert sliced.run(leases.reap) == 1
    report = check(sliced)
    assert report.clean, report.violations
    assert (report.leases, report.claims, report.warnings) == (4, 3, [])


def set_lease(conn: Connection, lease: LeaseView, **values: object) -> None:
    conn.execute(update(Lease).where(Lease.id == lease.id).values(**values))


def misalign(conn: Connection, lease: LeaseView) -> None:
    set_lease(conn, lease, length=lease.length + 4096)


def move_past_device_end(conn: Connection, lease: LeaseView) -> None:
    set_lease(conn, lease, offset=64 * MiB)


def straddle_device_end(conn: Connection, lease: LeaseView) -> None:
    """Starts on the device (aligned), ends past it: the bound is on the end, not the start."""
    set_lease(conn, lease, offset=64 * MiB - lease.length, length=2 * lease.length)


def move_before_device_start(conn: Connection, lease: LeaseView) -> None:
    set_lease(conn, lease, offset=-lease.length)


def move_out_of_claim(conn: Connection, lease: LeaseView) -> None:
    set_lease(conn, lease, offset=16 * MiB)  # aligned and on the device, past the 16 MiB slice


def empty(conn: Connection, lease: LeaseView) -> None:
    set_lease(conn, lease, length=0)


def end_its_claim(conn: Connection, lease: LeaseView) -> None:
    conn.execute(update(Claim).values(state="released"))


def give_claim_to_another_host(conn: Connection, lease: LeaseView) -> None:
    conn.execute(insert(Host).values(id="host-b", name="b", state="up",
                                     registered_at=lease.granted_at,
                                     last_seen_at=lease.granted_at))
    conn.execute(update(Claim).values(host_id="host-b"))


def delete_event(kind: EventKind) -> Callable[[Connection, LeaseView], None]:
    def corrupt(conn: Connection, lease: LeaseView) -> None:
        conn.execute(delete(Event).where(Event.lease_id == lease.id, Event.kind == kind))
    return corrupt


@pytest.mark.parametrize(("corrupt", "expected"), [
    (misalign, "is not aligned to 2097152"),
    (move_past_device_end, "lies outside emu0 of size 67108864"),
    (straddle_device_end, "lies outside emu0 of size 67108864"),
    (move_before_device_start, "lies outside emu0 of size 67108864"),
    (empty, "[0, +0) is not aligned to 2097152"),
    (move_out_of_claim, "sticks out of claim"),
    (end_its_claim, ", which is not live"),
    (give_claim_to_another_host, "of host host-b"),
    (delete_event(EventKind.LEASE_GRANTED), "has no lease.granted event"),
], ids=lambda x: getattr(x, "__name__", None))
def test_each_corruption_of_a_live_lease_is_reported(
    sliced: Ledger, corrupt: Callable[[Connection, LeaseView], None], expected: str
) -> None:
    lease = grant(sliced, 2 * MiB)
    assert check(sliced).clean
    with raw(sliced) as conn:
        corrupt(conn, lease)
    violations = check(sliced).violations
    assert any(v.startswith(f"lease {lease.id} ") and expected in v for v in violations), \
        violations


def claim_of(ledger: Ledger, lease: LeaseView) -> int:
    return int(ledger.read(lambda s, _: s.get(Lease, lease.id).claim_id))


def set_claim(conn: Connection, claim_id: int, **values: object) -> None:
    conn.execute(update(Claim).where(Claim.id == claim_id).values(**values))


@pytest.mark.parametrize(("values", "expected"), [
    ({"length": 16 * MiB + 4096}, "[0, +16781312) is not aligned to 2097152 on emu0"),
    ({"offset": 64 * MiB}, "[67108864, +16777216) lies outside emu0 of size 67108864"),
    ({"length": 128 * MiB}, "[0, +134217728) lies outside emu0 of size 67108864"),
], ids=["misaligned", "past-the-end", "straddling"])
def test_each_corruption_of_a_live_claim_is_reported(
        sliced: Ledger, values: dict[str, object], expected: str) -> None:
    claim_id = claim_of(sliced, grant(sliced, 2 * MiB))
    with raw(sliced) as conn:
        set_claim(conn, claim_id, **values)
    violations = check(sliced).violations
    assert f"claim {claim_id} {expected}" in violations, violations


def test_overlapping_live_claims_are_reported(sliced: Ledger) -> None:
    first, second = (claim_of(sliced, grant(sliced, 16 * MiB)) for _ in range(2))
    with raw(sliced) as conn:
        if conn.dialect.name == "sqlite":
            conn.execute(text("DROP TRIGGER tr_claims_no_overlap_update"))
        else:
            conn.execute(text("ALTER TABLE claims DROP CONSTRAINT ex_claims_live_extent"))
        set_claim(conn, second, offset=8 * MiB)  # [8, 24) over [0, 16)
    violations = check(sliced).violations
    assert f"live claims {first} and {second} overlap on device emu0" in violations, violations


def test_a_live_lease_past_its_expiry_is_a_warning_until_finalised(
        make_ledger: LedgerFactory, clock: ManualClock) -> None:
    """Not a violation (the reaper finalises it within a tick), but worth a word: from the
    instant it expires. A lease already ended and waiting for its scrub is not one."""
    ledger = make_ledger([emulated_spec(64 * MiB)], scrub=True)
    due = grant(ledger, 2 * MiB, ttl_s=5)
    scrubbing = grant(ledger, 2 * MiB, ttl_s=5)
    end(ledger, leases.release, scrubbing)
    clock.advance(5)  # exactly at `due`'s expiry
    report = check(ledger)
    assert report.clean
    assert [w.split(" expired at ")[0] for w in report.warnings] == [f"lease {due.id}"]
    assert report.warnings[0].endswith(" and is not finalised yet (is the daemon running?)")


def test_a_released_lease_without_its_event_is_reported(sliced: Ledger) -> None:
    lease = grant(sliced, 2 * MiB)
    end(sliced, leases.release, lease)
    with raw(sliced) as conn:
        delete_event(EventKind.LEASE_RELEASED)(conn, lease)
    assert check(sliced).violations == [
        f"lease {lease.id} is released without a lease.released event"
    ]


def drop_overlap_guard(conn: Connection) -> None:
    if conn.dialect.name == "sqlite":
        conn.execute(text("DROP TRIGGER tr_leases_no_overlap_insert"))
    else:
        conn.execute(text("ALTER TABLE leases DROP CONSTRAINT ex_leases_live_extent"))


def copy_lease(conn: Connection, lease: LeaseView) -> str:
    """A second live lease on the same bytes, with its own grant event (so only overlap is
    wrong)."""
    twin = uuid.uuid4().hex
    columns = [c for c in Lease.__table__.c if c.name != "id"]
    conn.execute(insert(Lease).from_select(
        ["id", *(c.name for c in columns)],
        select(literal(twin), *columns).where(Lease.id == lease.id),
    ))
    conn.execute(insert(Event).values(at=lease.granted_at, kind=EventKind.LEASE_GRANTED,
                                      actor="test", lease_id=twin, details={}))
    return twin


def test_overlapping_live_leases_are_reported(sliced: Ledger) -> None:
    lease = grant(sliced, 4 * MiB)
    with raw(sliced) as conn:
        drop_overlap_guard(conn)
        twin = copy_lease(conn, lease)
    (violation,) = check(sliced).violations
    assert "overlap on device emu0" in violation
    assert lease.id in violation and twin in violation


def run_cli(url: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, object]]:
    code = main(["fsck", "--database-url", url])
    return code, json.loads(capsys.readouterr().out)


def test_cli_exits_0_when_clean_and_1_on_a_violation(
    sliced: Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    lease = grant(sliced, 2 * MiB)
    code, out = run_cli(sliced.url, capsys)
    assert (code, out["clean"], out["violations"], out["leases"]) == (0, True, [], 1)
    with raw(sliced) as conn:
        misalign(conn, lease)
    code, out = run_cli(sliced.url, capsys)
    assert (code, out["clean"]) == (1, False)
    assert out["violations"] == check(sliced).violations != []


def test_a_device_handed_out_whole_holding_two_tenants_is_reported(
        make_ledger: LedgerFactory) -> None:
    """Untenanted leases on a device handed out whole are one scope (clean); another tenant's
    lease on it is a violation, whatever devices come before it."""
    whole = replace(emulated_spec(64 * MiB, "dax0.0"), kind=DeviceKind.DEVDAX)
    ledger = make_ledger([emulated_spec(64 * MiB, "emu0"), whole])
    first = ledger.run(partial(leases.grant, request=GrantRequest(
        2 * MiB, "test", ttl_s=600, device="dax0.0")))
    second = ledger.run(partial(leases.grant, request=GrantRequest(
        2 * MiB, "test", ttl_s=600, device="dax0.0")))
    assert check(ledger).clean and first.device == "dax0.0"
    with raw(ledger) as conn:
        set_lease(conn, second, tenant="team-b")
    (violation,) = check(ledger).violations
    assert violation.startswith("dax0.0 serves '' but holds live leases of ['', 'team-b']")



def end_session_only(conn: Connection, lease: LeaseView, session_id: str) -> None:
    conn.execute(update(ClientSession).where(ClientSession.id == session_id)
                 .values(state="closed"))


def give_session_to_another_tenant(conn: Connection, lease: LeaseView, session_id: str) -> None:
    conn.execute(update(ClientSession).where(ClientSession.id == session_id)
                 .values(tenant="b"))


def outlive_session(conn: Connection, lease: LeaseView, session_id: str) -> None:
    set_lease(conn, lease, expires_at=lease.expires_at + timedelta(seconds=60))


@pytest.mark.parametrize(("corrupt", "expected"), [
    (end_session_only, "which is closed"),
    (give_session_to_another_tenant, "of 'b' on host-a"),
    (outlive_session, "its session"),
], ids=lambda x: getattr(x, "__name__", None))
def test_each_corruption_of_a_lease_in_a_session_is_reported(
        sliced: Ledger, corrupt: Callable[[Connection, LeaseView, str], None],
        expected: str) -> None:
    grant(sliced, 2 * MiB)  # a plain lease, before it on the device: checked on past it
    opened = sliced.run(partial(sessions.open_session,
                                request=sessions.OpenRequest(actor="test", ttl_s=60)))
    lease = sliced.run(partial(leases.grant, request=GrantRequest(
        2 * MiB, "test", session_id=opened.id)))
    assert check(sliced).clean
    with raw(sliced) as conn:
        corrupt(conn, lease, opened.id)
    violations = check(sliced).violations
    assert any(v.startswith(f"lease {lease.id} ") and expected in v for v in violations), \
        violations


def test_the_smallest_lease_a_device_allows_is_no_violation(make_ledger: LedgerFactory) -> None:
    """One alignment unit is a whole lease: on a byte-addressed device (align 1), one byte."""
    ledger = make_ledger([emulated_spec(64 * MiB, "bytes0", align=1)])
    assert grant(ledger, 1).length == 1
    assert check(ledger).violations == []
