"""Which pool a device is in: placement rules for devices as they appear, and devices an admin
moves by hand (kept where they were put). Both are ledger objects, the same for every host.

Rules place a device when it first appears, and again when it comes back after going missing,
unless an admin assigned it; they do not move devices already placed (a move is refused while a
lease or another host's claim holds the device, which the rules cannot wait for). A host's
config (device_pools) seeds the rules once; the ledger's win after that.

Ledger commands (functions of `Tx`) run by the writer; none commits. Each checks everything
before its first write, so a refused change leaves every row as it was.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from fnmatch import fnmatchcase

from sqlalchemy import select
from sqlalchemy.orm import Session

from poold.errors import DeviceBusy, InvalidRequest, UnknownDevice
from poold.inventory import DeviceSpec
from poold.ledger import queries as q
from poold.ledger.pools import live_pool
from poold.ledger.tx import Tx
from poold.models import Device, PoolRule
from poold.types import EventKind, is_text

RULE_FIELDS = ("device", "name", "identity", "numa_node", "serial")
RULES_MAX = 256


@dataclass(frozen=True, slots=True)
class Rule:
    """Devices whose `field` matches the glob `pattern` join `pool` (first match wins)."""

    field: str
    pattern: str
    pool: str

    def matches(self, spec: DeviceSpec) -> bool:
        values: list[str] = {
            "device": [spec.devname, spec.uid], "name": [spec.devname], "identity": [spec.uid],
            "numa_node": [] if spec.numa_node is None else [str(spec.numa_node)],
            "serial": serials(spec.uid),
        }[self.field]
        return any(fnmatchcase(value, self.pattern) for value in values)


def serials(uid: str) -> list[str]:
    """The CXL memdev serials a device's identity names (`cxl:<serial>/<dpa>,...+<offset>`,
    poold.inventory.discovery); none for any other device."""
    if not uid.startswith("cxl:"):
        return []
    heads = uid.removeprefix("cxl:").split("+", 1)[0]
    return [head.split("/", 1)[0] for head in heads.split(",") if "/" in head]


def rules(session: Session) -> list[Rule]:
    names = q.pools.pool_names(session)
    return [Rule(r.field, r.pattern, names[r.pool_id])
            for r in session.scalars(select(PoolRule).order_by(PoolRule.position))]


def set_rules(tx: Tx, wanted: list[Rule], actor: str) -> list[Rule]:
    """Replace the placement rules (in order; first match wins). They place devices that
    appear from now on (and ones back after going missing, unless an admin assigned them);
    devices already in a pool stay: move them to change that."""
    if len(wanted) > RULES_MAX:
        raise InvalidRequest(f"at most {RULES_MAX} rules")
    for rule in wanted:
        if rule.field not in RULE_FIELDS:
            raise InvalidRequest(f"rule field {rule.field!r}: one of {', '.join(RULE_FIELDS)}")
        if not 0 < len(rule.pattern) <= 256 or not is_text(rule.pattern):
            raise InvalidRequest(f"rule pattern {rule.pattern[:64]!r}: 1 to 256 characters, no "
                                 "control characters")
    pool_ids = {rule.pool: live_pool(tx.session, rule.pool).id for rule in wanted}
    before = rules(tx.session)
    if before == wanted:
        return before
    for old in tx.session.scalars(select(PoolRule)):
        tx.session.delete(old)
    tx.session.flush()
    for position, rule in enumerate(wanted):
        tx.session.add(PoolRule(position=position, field=rule.field, pattern=rule.pattern,
                                pool_id=pool_ids[rule.pool]))
    tx.session.flush()
    q.pools.catalog_changed(tx.conn)
    q.events.add_event(tx.session, at=tx.now, kind=EventKind.POOL_RULES_CHANGED, actor=actor,
                       host_id=tx.host_id, rules=[asdict(r) for r in wanted],
                       was=[asdict(r) for r in before])
    return wanted


def seed_rules(tx: Tx, config: list[Rule]) -> list[Rule]:
    """The ledger's rules; the first host to start with rules in its config (device_pools)
    writes them there, once (an admin's later edits, even to none, are not undone)."""
    if q.counters.value(tx.session, "rules_seeded") == 0 and config:
        set_rules(tx, config, actor="daemon")
        q.counters.set_value(tx.session, "rules_seeded", 1)
    return rules(tx.session)


def move_device(tx: Tx, device_id: int, name: str, actor: str) -> Device:
    """Put a device in another pool (an explicit assignment: it stays there across restarts,
    whatever the config's placement rules say, until it goes missing). Refused, changing
    nothing, while a lease holds bytes on it (live, or being scrubbed) or another host holds a
    claim on it (that host could grant there under the old pool's policy): drain it, let them
    end. Idempotent."""
    device = tx.session.get(Device, device_id)
    if device is None:
        raise UnknownDevice(f"no device {device_id}")
    pool = live_pool(tx.session, name)
    if device.pool_id == pool.id:
        device.pool_assigned = True  # kept there from now on, whatever the rules say
        return device
    q.devices.lock_device(tx.conn, device.id)  # a grant claiming here waits, then sees the move
    holding = q.leases.holding_leases_on_device(tx.session, device.id)
    if holding:
        raise DeviceBusy(f"{device.devname} holds {len(holding)} lease(s) "
                         f"({', '.join(lease.id for lease in holding[:3])}): drain it and let "
                         "them end, or revoke them, then move it")
    others = sorted({c.host_id for c in q.claims.live_claims(tx.session, device_id=device.id)
                     if c.host_id != tx.host_id})
    if others:
        raise DeviceBusy(f"{device.devname}: host(s) {', '.join(others)} hold claims on it; "
                         "drain it and let their idle claims go back, then move it")
    before = q.pools.pool_names(tx.session).get(device.pool_id)
    device.pool_id = pool.id
    device.pool_assigned = True
    device.updated_at = tx.now
    tx.session.flush()
    q.pools.catalog_changed(tx.conn)
    q.events.add_event(tx.session, at=tx.now, kind=EventKind.DEVICE_CHANGED, actor=actor,
                       host_id=tx.host_id, device_id=device.id, devname=device.devname,
                       changed={"pool": [before, name]})
    return device
