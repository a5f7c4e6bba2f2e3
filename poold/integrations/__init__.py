"""poold.integrations: poold as the KV offload tier of inference engines.

One module per engine, each an optional extra (`pip install poold[lmcache]`), all on the client
SDK and poold.kv only (import-linter): `objects` (an engine's objects of any size over the
block store) is shared; `lmcache` plugs into LMCache. Importing this package imports no engine.
"""
