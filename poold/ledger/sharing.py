"""Sharing devices between hosts: host liveness, idle claims given back, capacity reclaimed.

Ledger commands (functions of `Tx`) run by each host's writer; none commits. What it owns:

- Heartbeat and lost hosts. Every daemon's tick writes `hosts.last_seen_at` with the ledger's
  clock. A host not seen for `lost_after_s` (host_ttl + grace) is marked lost by whichever host
  ticks first; that host adopts the lost host's claims and its leases that still hold bytes: the
  active ones end as `lost` (scrubbed by the adopter before reuse, in a scrubbing pool), and
  claims left without a lease are released at once. The lost host itself stopped granting and
  told its clients their leases were lost after host_ttl without the ledger (fencing, see
  poold.ledger.liveness), so no byte has two holders.
- Idle claims: a claim that held no lease for claim_idle_s goes back to the device.
- Making room when a grant finds the device full (`make_room`): leases past expires_at on the
  device are expired whoever holds them, lost hosts are reclaimed, and every claim on the device
  is trimmed to the runs of leases it holds, so idle claimed bytes of any host are free again.
- Placement safety: a lease is placed in an own claim only after locking that claim FOR SHARE
  and seeing it is still live and this host's (`claim_is_mine`); another host trims a claim
  only under FOR UPDATE, so a trim and a grant in the same claim never both commit.

What it leaves alone: where a lease goes inside the claims (poold.ledger.leases and space).
"""

from __future__ import annotations

import logging
from datetime import timedelta

from poold.ledger import queries as q
from poold.ledger.space import HostSpace
from poold.ledger.tx import Tx, scrubs_before_reuse
from poold.ledger.views import DeviceRecord, LeaseRecord
from poold.types import EventKind, Extent, LeaseState

log = logging.getLogger(__name__)

REAP_LIMIT = 500


def claim_is_mine(tx: Tx, claim_id: int) -> bool:
    """The claim is still live and this host's (checked once per transaction, locked)."""
    if claim_id in tx.checked_claims:
        return True
    if q.claims.own_claim_is_live(tx.conn, claim_id, tx.host_id):
        tx.checked_claims.add(claim_id)
        return True
    return False


def resync_space(tx: Tx) -> None:
    """Reload this host's space from the ledger when another host changed its claims or
    leases."""
    if q.hosts.own_fingerprint(tx.conn, tx.host_id) == tx.space.fingerprint():
        return
    session = tx.session
    align_of = {d.id: d.align for d in q.devices.list_devices(session)}
    tx.space.reload(HostSpace.rebuild(q.claims.live_claims(session, host_id=tx.host_id),
                                      q.leases.live_leases(session, host_id=tx.host_id), align_of))
    tx.checked_claims.clear()
    log.info("space.reloaded host=%s", tx.host_id)


def release_idle_claims(tx: Tx, idle_s: float) -> int:
    """Give back this host's claims that held no lease for `idle_s` seconds."""
    released = 0
    for claim in tx.space.idle_claims(tx.now, idle_s):
        if q.claims.release_claim_if_idle(tx.conn, claim.claim_id, tx.host_id, tx.now):
            tx.event(EventKind.CLAIM_RELEASED, "allocator", host_id=tx.host_id,
                     device_id=claim.device_id, claim_id=claim.claim_id,
                     offset=claim.extent.offset, length=claim.extent.length, reason="idle")
            released += 1
        tx.space.drop_claim(claim.claim_id)
    return released


def reclaim_lost_hosts(tx: Tx) -> None:
    """Mark hosts silent for longer than tx.lost_after_s lost and adopt what they held on shared
    devices (what lies on a lost host's own devices stays its own until it comes back: no other
    host reaches those bytes, to place leases or to zero them)."""
    if tx.lost_after_s is None:
        return
    lost = q.hosts.mark_lost_hosts(tx.conn, tx.now - timedelta(seconds=tx.lost_after_s),
                                   tx.host_id)
    for host_id in lost:
        _adopt(tx, host_id)


def _adopt(tx: Tx, lost_host: str) -> None:
    tx.event(EventKind.HOST_LOST, "reaper", host_id=lost_host, adopted_by=tx.host_id,
             after_s=tx.lost_after_s)
    claims = q.claims.adopt_claims(tx.conn, lost_host, tx.host_id)
    for claim_id, device_id, extent in claims:
        device = _device(tx, device_id)
        tx.space.add_claim(claim_id, device_id, extent, device.align)
        tx.checked_claims.add(claim_id)
        tx.event(EventKind.CLAIM_ADOPTED, "reaper", host_id=tx.host_id, device_id=device_id,
                 claim_id=claim_id, offset=extent.offset, length=extent.length,
                 from_host=lost_host)
    for lease in q.leases.adopt_leases(tx.conn, lost_host, tx.host_id):
        tx.space.reserve(lease.claim_id, Extent(lease.offset, lease.length))
        if (lease.state == LeaseState.ACTIVE
                and q.leases.lose_active_lease(tx.conn, lease.id, tx.now)):
            _lost(tx, lease, f"host {lost_host} lost", lost_host)
    for claim_id, device_id, extent in claims:  # what holds no lease goes back now
        if q.claims.release_claim_if_idle(tx.conn, claim_id, tx.host_id, tx.now):
            tx.space.drop_claim(claim_id)
            tx.event(EventKind.CLAIM_RELEASED, "reaper", host_id=tx.host_id, device_id=device_id,
                     claim_id=claim_id, offset=extent.offset, length=extent.length,
                     reason=f"host {lost_host} lost")
    log.warning("host.lost host=%s adopted_by=%s claims=%d", lost_host, tx.host_id, len(claims))


def lose_own_leases(tx: Tx, reason: str, only: set[str] | None = None) -> int:
    """End every active lease of this host (of those in `only`) as lost: it was fenced and its
    clients were told so, or their memory did not survive a restart."""
    lost = 0
    for lease in q.leases.own_active_leases(tx.conn, tx.host_id):
        if only is not None and lease.id not in only:
            continue
        if q.leases.lose_active_lease(tx.conn, lease.id, tx.now):
            _lost(tx, lease, reason, tx.host_id)
            lost += 1
    return lost


def _lost(tx: Tx, lease: LeaseRecord, reason: str, holder: str) -> None:
    """An active lease just became lost in the ledger; it now belongs to tx's host. Its bytes
    are free at once, or kept as `scrubbing` until this host's scrubber zeroed them."""
    tx.event(EventKind.LEASE_LOST, "reaper", host_id=holder, device_id=lease.device_id,
             lease_id=lease.id, offset=lease.offset, length=lease.length,
             generation=lease.generation, reason=reason, by=tx.host_id)
    pool = tx.catalog.pool_by_id(lease.pool_id)
    if pool is None:
        tx.refresh_catalog()
        pool = tx.catalog.pool_by_id(lease.pool_id)
    if pool is not None and scrubs_before_reuse(tx, pool, lease.device_id) and q.scrubs.start_scrub(
            tx.conn, lease.id, LeaseState.LOST):
        return
    tx.space.free(lease.claim_id, Extent(lease.offset, lease.length))


def make_room(tx: Tx, device: DeviceRecord) -> None:
    """The device has no free extent for a new claim: free what nobody uses (call under
    queries.devices.lock_device)."""
    _expire_others(tx, device)
    reclaim_lost_hosts(tx)
    _trim_claims(tx, device)


def _expire_others(tx: Tx, device: DeviceRecord) -> None:
    """Expire any host's leases on the device past expires_at (their owner's reaper would, within
    a tick); in a scrubbing pool they keep their bytes until their owner zeroed them."""
    for lease in q.leases.expired_on_device(tx.conn, device.id, tx.now, REAP_LIMIT):
        if q.leases.expire_lease(tx.conn, lease.id, tx.now):  # else its owner just ended it
            _expired_here(tx, device, lease)


def _expired_here(tx: Tx, device: DeviceRecord, lease: LeaseRecord) -> None:
    tx.event(EventKind.LEASE_EXPIRED, "reaper", host_id=lease.host_id, device_id=device.id,
             lease_id=lease.id, offset=lease.offset, length=lease.length,
             generation=lease.generation, expired_by=tx.host_id)
    pool = tx.catalog.pool_by_id(lease.pool_id)
    if pool is not None and scrubs_before_reuse(tx, pool, device.id) and q.scrubs.start_scrub(
            tx.conn, lease.id, LeaseState.EXPIRED):
        return
    if lease.host_id == tx.host_id:
        tx.space.free(lease.claim_id, Extent(lease.offset, lease.length))


def _trim_claims(tx: Tx, device: DeviceRecord) -> None:
    """Shrink every claim on the device that another transaction does not hold to the runs of
    leases inside it (none: the claim ends), re-pointing those leases to the new claims."""
    for claim_id, owner, extent in q.claims.lock_claims_on_device(tx.conn, device.id):
        found = q.leases.holding_in_range(tx.conn, device.id, extent)
        if found is None:
            continue  # its owner is changing a lease in it right now
        if any(not extent.contains(e) for _, _, e in found):
            log.error("claim.not_trimmed claim=%s: a lease crosses its edge; run `poold fsck`",
                      claim_id)
            continue
        runs = _runs([e for _, _, e in found])
        if runs == [extent]:
            continue
        held = [(i, e) for i, c, e in found if c == claim_id]  # misfiled ones stay misfiled
        q.claims.end_claim(tx.conn, claim_id, tx.now)
        tx.event(EventKind.CLAIM_RELEASED, "allocator", host_id=owner, device_id=device.id,
                 claim_id=claim_id, offset=extent.offset, length=extent.length,
                 reason=f"trimmed for {tx.host_id}")
        if owner == tx.host_id:
            tx.space.drop_claim(claim_id)
        for run in runs:
            new_id = q.claims.insert_claim(tx.conn, device_id=device.id, host_id=owner, extent=run,
                                           now=tx.now)
            inside = [(i, e) for i, e in held if run.contains(e)]
            q.leases.repoint_leases(tx.conn, [i for i, _ in inside], new_id)
            tx.event(EventKind.CLAIM_CREATED, "allocator", host_id=owner, device_id=device.id,
                     claim_id=new_id, offset=run.offset, length=run.length,
                     reason=f"trimmed from claim {claim_id}")
            if owner == tx.host_id:
                tx.space.add_claim(new_id, device.id, run, device.align)
                tx.checked_claims.add(new_id)
                for _, e in inside:
                    tx.space.reserve(new_id, e)


def _runs(extents: list[Extent]) -> list[Extent]:
    """Maximal runs of touching extents (sorted by offset)."""
    runs: list[Extent] = []
    for e in sorted(extents, key=lambda e: e.offset):
        if runs and runs[-1].end == e.offset:
            runs[-1] = Extent(runs[-1].offset, runs[-1].length + e.length)
        else:
            runs.append(e)
    return runs


def _device(tx: Tx, device_id: int) -> DeviceRecord:
    device = tx.device(device_id)
    assert device is not None
    return device
