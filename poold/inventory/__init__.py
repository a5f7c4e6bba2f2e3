"""Inventory: turns driver snapshots into `DeviceSpec`s, the ledger's view of leasable memory.

Owns the mapping from kernel objects to poold devices (identity, kind, chardev, size, align). Leaves
storing them to the ledger, which reconciles specs into device rows.
"""

from poold.inventory.specs import DeviceSpec, spec_from_emulated, specs_from_topology

__all__ = ["DeviceSpec", "spec_from_emulated", "specs_from_topology"]
