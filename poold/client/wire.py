"""Rebuilding the daemon's errors on the client side, from their one wire shape."""

from __future__ import annotations

from typing import Any

from poold import errors

# Error names the API uses that are not PooldError classes.
_WIRE_ALIASES: dict[str, type[errors.PooldError]] = {
    "ValidationError": errors.InvalidRequest,
    "NotFound": errors.NotFound,
}


def error_from_wire(status: int, payload: Any) -> errors.PooldError:
    """Rebuild the daemon's exception from `{"error": ClassName, "detail": ...}`."""
    name = payload.get("error") if isinstance(payload, dict) else None
    detail = payload.get("detail") if isinstance(payload, dict) else payload
    cls = getattr(errors, str(name), None)
    if not (isinstance(cls, type) and issubclass(cls, errors.PooldError)):
        cls = _WIRE_ALIASES.get(str(name), errors.PooldError)
    exc = cls(str(detail) if not isinstance(detail, str) else detail)
    exc.status = status  # type: ignore[attr-defined]
    return exc
