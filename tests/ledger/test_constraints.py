"""The database itself refuses overlapping live extents, on SQLite (triggers) and PostgreSQL
(exclusion constraints): two 'active' claims or leases on one device may not share a byte, while
adjacent ranges, other devices and finished ('released') rows are accepted.

Rows are written with plain SQL through the writer engine, bypassing every check in poold.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from poold.models import Claim, Device, Host, Lease, Pool
from poold.types import HOLDING_STATES, MiB
from tests.conftest import migrated_writer_engine

NOW = datetime(2026, 1, 1, tzinfo=UTC)
DEV_A, DEV_B = 1, 2
first_claim = select(func.min(Claim.id)).scalar_subquery()


@pytest.fixture
def engine(ledger_url: str) -> Iterator[Engine]:
    with migrated_writer_engine(ledger_url) as engine:
        with engine.begin() as conn:
            conn.execute(insert(Host), [dict(id="h", name="h", state="up", registered_at=NOW,
                                             last_seen_at=NOW)])
            conn.execute(insert(Pool), [dict(id=1, name="p", claim_slice=0, default_ttl_s=60,
                                             max_ttl_s=60, scrub_on_release=False,
                                             created_at=NOW)])
            conn.execute(insert(Device), [
                dict(id=d, uid=f"u{d}", host_id="h", pool_id=1, kind="emulated",
                     devname=f"emu{d}", chardev="/nonexistent", size=64 * MiB, align=MiB,
                     state="online", created_at=NOW, updated_at=NOW)
                for d in (DEV_A, DEV_B)
            ])
            # A finished claim for leases to point at: not live, so it overlaps nothing.
            conn.execute(insert(Claim), [dict(device_id=DEV_A, host_id="h", offset=0,
                                              length=64 * MiB, state="released", created_at=NOW)])
        yield engine


def add(engine: Engine, table: str, device: int, offset: int, length: int,
        state: str = "active") -> Any:
    """Insert one claim or lease of [offset, offset + length) MiB in its own transaction."""
    row: dict[str, Any] = dict(device_id=device, host_id="h", offset=offset * MiB,
                               length=length * MiB, state=state)
    if table == "claims":
        model: Any = Claim
        row.update(created_at=NOW)
    else:
        model = Lease
        row.update(id=uuid.uuid4().hex, pool_id=1, claim_id=first_claim, generation=1, ttl_s=60,
                   granted_at=NOW, expires_at=NOW, labels={})
    with engine.begin() as conn:
        return conn.execute(insert(model).values(row).returning(model.id)).scalar_one()


def set_row(engine: Engine, table: str, row_id: Any, **values: Any) -> None:
    model: Any = Claim if table == "claims" else Lease
    with engine.begin() as conn:
        conn.execute(update(model).where(model.id == row_id).values(**values))


tables = pytest.mark.parametrize("table", ["claims", "leases"])


@tables
@pytest.mark.parametrize("other", [(2, 4), (0, 4), (3, 1), (0, 64), (5, 1)],
                         ids=["partial", "same", "inside", "around", "last-mib"])
def test_overlapping_live_extents_are_refused(engine: Engine, table: str,
                                              other: tuple[int, int]) -> None:
    add(engine, table, DEV_A, 0, 6)
    # SQLite: the trigger's RAISE(ABORT) message; PostgreSQL: the exclusion constraint's name.
    with pytest.raises(IntegrityError, match=rf"overlapping live extent on {table}|ex_{table}_"):
        add(engine, table, DEV_A, *other)


@tables
def test_adjacent_ranges_and_other_devices_are_accepted(engine: Engine, table: str) -> None:
    add(engine, table, DEV_A, 4, 4)
    add(engine, table, DEV_A, 0, 4)  # touches at 4 MiB from below
    add(engine, table, DEV_A, 8, 4)  # and from above
    add(engine, table, DEV_B, 0, 64)  # same bytes, another device


@tables
def test_finished_rows_do_not_count(engine: Engine, table: str) -> None:
    add(engine, table, DEV_A, 0, 8, state="released")
    add(engine, table, DEV_A, 2, 4)  # live over a released row
    add(engine, table, DEV_A, 0, 8, state="released")  # and a released row over a live one


@tables
def test_reviving_or_moving_onto_a_live_extent_is_refused(engine: Engine, table: str) -> None:
    add(engine, table, DEV_A, 0, 4)
    ended = add(engine, table, DEV_A, 2, 4, state="released")
    with pytest.raises(IntegrityError):
        set_row(engine, table, ended, state="active")
    elsewhere = add(engine, table, DEV_A, 8, 4)
    with pytest.raises(IntegrityError):
        set_row(engine, table, elsewhere, offset=2 * MiB)
    with pytest.raises(IntegrityError):
        set_row(engine, table, elsewhere, length=60 * MiB, offset=0)
    set_row(engine, table, elsewhere, offset=4 * MiB)  # adjacent: fine


# Extents of whole MiB inside a 16 MiB device: small enough that random ones collide often.
_extent = st.tuples(st.integers(0, 15), st.integers(1, 6))
_step = st.one_of(
    st.tuples(st.just("add"), _extent, st.sampled_from(["active", "scrubbing", "released"])),
    st.tuples(st.just("set"), st.integers(0, 30), st.sampled_from(["active", "released"])),
    st.tuples(st.just("move"), st.integers(0, 30), _extent),
)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(_step, min_size=1, max_size=20))
def test_leases_guard_refuses_exactly_the_overlaps(engine: Engine,
                                                   steps: list[tuple[Any, ...]]) -> None:
    """Any sequence of inserts, state changes and moves of leases on one device: the database
    refuses a write exactly when it would leave two holding leases sharing a byte (judged here
    by comparing every pair). SQLite's trigger looks at one neighbour only (migration 0013),
    which is right only while the holding leases never overlap, and this checks it is."""
    with engine.begin() as conn:  # each example starts from an empty device
        conn.execute(delete(Lease))
    rows: dict[Any, tuple[int, int, str]] = {}  # id -> (offset MiB, length MiB, state)

    def overlaps(lease_id: Any, offset: int, length: int, state: str) -> bool:
        return state in HOLDING_STATES and any(
            s in HOLDING_STATES and o < offset + length and offset < o + n
            for other, (o, n, s) in rows.items() if other != lease_id)

    for kind, first, second in steps:
        if kind == "add":
            (offset, length), state = first, second
            refused = overlaps(None, offset, length, state)
            try:
                rows[add(engine, "leases", DEV_A, offset, length, state=state)] = (
                    offset, length, state)
                assert not refused, f"overlap accepted: {(offset, length, state)} over {rows}"
            except IntegrityError:
                assert refused, f"refused without overlap: {(offset, length, state)}, {rows}"
            continue
        if not rows:
            continue
        lease_id = sorted(rows, key=str)[first % len(rows)]
        offset, length, state = rows[lease_id]
        if kind == "set":
            state = second
        else:
            offset, length = second
        refused = overlaps(lease_id, offset, length, state)
        try:
            set_row(engine, "leases", lease_id, offset=offset * MiB, length=length * MiB,
                    state=state)
            assert not refused, f"overlap accepted: {(offset, length, state)} over {rows}"
            rows[lease_id] = (offset, length, state)
        except IntegrityError:
            assert refused, f"refused without overlap: {(offset, length, state)}, {rows}"
