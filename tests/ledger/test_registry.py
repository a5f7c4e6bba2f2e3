"""The inventory's changes in the ledger: a device whose memory changed under its leases (its
chardev, kind or align) ends them as lost, each on record, and frees their bytes; leases
elsewhere, and ones already ended, stay as they were."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from poold.ledger import leases, reads
from poold.ledger import queries as q
from poold.ledger.fsck import fsck
from poold.ledger.ledger import Ledger
from poold.ledger.views import LeaseView
from poold.types import LeaseState, MiB
from tests.conftest import LedgerFactory, bootstrap, emulated_spec
from tests.ledger.test_reads import grant

EMU0, EMU1 = emulated_spec(64 * MiB, "emu0"), emulated_spec(64 * MiB, "emu1")


def view(ledger: Ledger, lease_id: str) -> LeaseView:
    return ledger.read(lambda s, now: reads.lease(s, lease_id, now))


def test_a_device_changed_under_its_leases_loses_them(make_ledger: LedgerFactory) -> None:
    ledger = make_ledger([EMU0, EMU1])
    doomed = [grant(ledger, "emu0", 4 * MiB) for _ in range(2)]
    ended = grant(ledger, "emu0", 4 * MiB)
    ledger.run(partial(leases.release, lease_id=ended.id, actor="test"))
    elsewhere = grant(ledger, "emu1", 4 * MiB)
    moved = replace(EMU0, chardev="/nonexistent/emu0-elsewhere")
    ledger.run(partial(bootstrap, specs=[moved, EMU1]))
    for lease in doomed:
        lost = view(ledger, lease.id)
        assert lost.state is LeaseState.LOST and lost.ended_at is not None
        (event,) = ledger.read(lambda s, _, i=lease.id: reads.events(s, lease_id=i,
                                                                     kind="lease.lost"))
        assert (event.actor, event.host, event.device_id) == ("inventory", ledger.host_id,
                                                              lease.device_id)
        assert event.details["reason"] == "device emu0 changed: chardev"
        assert (event.details["offset"], event.details["length"]) == (lease.offset,
                                                                      lease.length)
    assert view(ledger, ended.id).state is LeaseState.RELEASED
    assert view(ledger, elsewhere.id).state is LeaseState.ACTIVE
    assert grant(ledger, "emu0", 64 * MiB).offset == 0  # the lost leases' bytes are free
    assert ledger.read(fsck).clean


def test_a_lease_that_ended_meanwhile_is_not_lost_again(make_ledger: LedgerFactory) -> None:
    """Losing a lease is a no-op once it has ended: on PostgreSQL its holder's host can end it
    between this writer's read of the live leases and its update (the update then waits for
    that commit and must find nothing to do)."""
    ledger = make_ledger([EMU0])
    ended = grant(ledger, "emu0", 4 * MiB)
    ledger.run(partial(leases.release, lease_id=ended.id, actor="test"))
    before = view(ledger, ended.id)
    assert ledger.run(lambda tx: q.leases.lose_lease(tx.session, ended.id, tx.now)) == 0
    assert view(ledger, ended.id) == before
