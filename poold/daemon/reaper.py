"""The ledger side of one reaper tick: this host's heartbeat, expired leases finalised, elastic
leases kept past the deadline of an ask revoked, lost hosts reclaimed, idle claims given back,
and a fence lifted once the ledger answers again.

`Daemon.tick` runs it every reap_interval_s and adds metrics and logs; the ledger tests run the
very same function on in-process ledgers, so what they prove is what the daemon does. It leaves
the order of work inside each step to poold.ledger (leases.reap, sharing).
"""

from __future__ import annotations

import logging

from poold.ledger import leases, reclaims, registry, sessions, sharing
from poold.ledger.ledger import Ledger
from poold.ledger.tx import Tx

log = logging.getLogger(__name__)


def tick(ledger: Ledger, host_name: str, claim_idle_s: float) -> int:
    """One tick; returns how many leases it finalised. Raises LedgerUnavailable (HostFenced once
    silent past host_ttl) when the ledger cannot be reached.

    After a fence (poold.ledger.liveness) the leases its clients were told are lost are
    recorded lost in the same transaction as the heartbeat, before the host grants again."""
    liveness = ledger.liveness
    fenced = liveness.fenced if liveness is not None else False
    # Read before submitting: the fence is measured from when a heartbeat was sent, not
    # committed, so it always falls before other hosts' lost deadline.
    started = liveness.started() if liveness is not None else 0.0

    def command(tx: Tx) -> int:
        registry.register_host(tx, host_name)
        if fenced:
            lost = sharing.lose_own_leases(tx, "host fenced: no ledger for host_ttl")
            log.warning("host.unfenced host=%s leases_lost=%d", tx.host_id, lost)
        sharing.resync_space(tx)
        reaped = leases.reap(tx)
        sessions.reap(tx)
        reclaims.revoke_overdue(tx)
        sharing.reclaim_lost_hosts(tx)
        sharing.release_idle_claims(tx, claim_idle_s)
        return reaped

    reaped = ledger.run(command)
    if liveness is not None:
        liveness.beat(started)
        if fenced:
            liveness.recovered()
    return reaped
