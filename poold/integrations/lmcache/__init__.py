"""poold as LMCache's KV tier (`pip install 'poold[lmcache]'`, LMCache 0.5.6).

- PooldL2Adapter (l2.py): an L2 adapter for LMCache's multi-process server, named in
  `lmcache server --l2-adapter '{"type": "plugin", "module_path": "poold.integrations.lmcache",
  "class_name": "PooldL2Adapter", "adapter_params": {...}}'`.
- PooldBackend (backend.py): the in-process storage plugin, `storage_plugins: ["poold"]`.

LMCache loads both by this module path, so both are named here; their parameters are
poold.integrations.settings.TierSettings.
"""

from poold.integrations.lmcache.backend import PooldBackend
from poold.integrations.lmcache.l2 import PooldL2Adapter, PooldL2AdapterConfig

__all__ = ["PooldBackend", "PooldL2Adapter", "PooldL2AdapterConfig"]
