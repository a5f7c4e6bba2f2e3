"""The ledger: hosts, pools, devices, claims, leases and events, and every rule about them.

Writes go through the single `LedgerWriter` as commands from `leases` and `registry`; reads through
`reads`; all SQL lives in `queries`; `fsck` checks the invariants of DESIGN.md.
"""
