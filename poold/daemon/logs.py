"""How the daemon's log records are written: text lines for people, or JSON lines for shippers.

Owns the root handler `poold serve` installs (stderr, which systemd sends to the journal) and the
JSON formatter. Records stay what the modules log: an event named `noun.verb` followed by
`key=value` context; the JSON form lifts that context into fields.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import Any

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
# `key=value` pairs in a rendered message; a value runs to the next blank or ';'.
_CONTEXT = re.compile(r"(?<![\w.])([A-Za-z_]\w*)=([^\s;]+)")
# What every LogRecord carries; anything else on a record came from `extra=` and is context.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "taskName"}
_RESERVED = frozenset({"time", "level", "logger", "message", "exception"})


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, then the record's
    key=value context and `extra=` fields, and `exception` when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": message,
        }
        context = {k: v for k, v in _CONTEXT.findall(message)}
        context.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        for key, value in context.items():
            line[f"ctx_{key}" if key in _RESERVED else key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure_logging(level: str, log_format: str) -> None:
    """Send every record at `level` and above to stderr as `log_format` (text or json)."""
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level, handlers=[handler], force=True)
