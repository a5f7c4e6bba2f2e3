"""HTTP control plane: FastAPI app, wire schemas, routers and the error table.

Importing `api.schemas` pulls in pydantic only, so the client SDK can share the wire schemas
without FastAPI.
"""
