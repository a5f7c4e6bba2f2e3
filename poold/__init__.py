"""poold: leases CXL Type-3 and DAX memory to inference engines.

The package holds the daemon's domain (types, errors, config, ledger, allocator, inventory), its
composition root and CLI, and the client SDK. The HTTP surface lives in the sibling package `api`,
kernel-facing code in `drivers`.
"""

__version__ = "0.1.0"
