"""The writer's hottest statements, run on the driver's own cursor inside SQLAlchemy's transaction.

A Core `conn.execute` of a prebuilt statement still builds an execution context, processes the
parameters and sets up a result for every call: about four times what the driver itself takes
for the short statements a grant or release runs (a transaction of three such statements: 0.95
ms through Core, 0.24 ms through the cursor, 0.45 ms through exec_driver_sql, on this project's
2-core machine). A HotStatement compiles its Core statement once per dialect (and, for an
insert, per set of columns), keeps the type processors SQLAlchemy would apply (UTCDateTime, JSON,
SQLite's text timestamps) and runs the compiled SQL on the transaction's DBAPI cursor.

What stays SQLAlchemy's: the transaction (begin, commit, rollback) and what an error means
(poold.db.cursor_execute raises what Core's execute would), so the writer's handling of refused
data, transient conflicts and dropped connections is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Dialect
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.dml import Insert
from sqlalchemy.sql.expression import ClauseElement

from poold.db import cursor_execute

Processor = Callable[[Any], Any] | None


@dataclass(frozen=True, slots=True)
class _Compiled:
    sql: str
    names: tuple[str, ...]             # the parameters, in the order a positional driver wants
    positional: bool
    binds: tuple[Processor, ...]       # per name
    fixed: Mapping[str, Any]           # the statement's own values (its literals), by name
    results: tuple[Processor, ...]     # per result column

    def parameters(self, values: Mapping[str, Any]) -> Sequence[Any] | dict[str, Any]:
        fixed = self.fixed
        given = [values[n] if n in values or n not in fixed else fixed[n] for n in self.names]
        processed = [v if p is None else p(v) for v, p in zip(given, self.binds, strict=True)]
        return processed if self.positional else dict(zip(self.names, processed, strict=True))

    def row(self, raw: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(v if p is None else p(v) for v, p in zip(raw, self.results, strict=True))


class HotStatement:
    """A Core statement (select, update, delete, or insert with or without RETURNING) run on the
    driver's cursor; its parameters are bound by name, as with `conn.execute`."""

    def __init__(self, statement: ClauseElement) -> None:
        self._statement = statement
        self._compiled: dict[tuple[str, tuple[str, ...]], _Compiled] = {}

    def rows(self, conn: Connection, values: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """Run it once; the rows it returned (RETURNING or a select), processed."""
        compiled = self._for(conn.dialect, values)
        cursor = cursor_execute(conn, compiled.sql, compiled.parameters(values))
        try:
            if cursor.description is None:
                return []
            return [compiled.row(raw) for raw in cursor.fetchall()]
        finally:
            cursor.close()

    def rowcount(self, conn: Connection, values: Mapping[str, Any]) -> int:
        """Run it once; how many rows it changed."""
        compiled = self._for(conn.dialect, values)
        cursor = cursor_execute(conn, compiled.sql, compiled.parameters(values))
        try:
            if cursor.description is not None:
                cursor.fetchall()  # sqlite3 counts the rows of a RETURNING as they are read
            return int(cursor.rowcount)
        finally:
            cursor.close()

    def many(self, conn: Connection, values: Sequence[Mapping[str, Any]]) -> None:
        """Run it once per mapping, in one executemany (every mapping names the same keys)."""
        if not values:
            return
        compiled = self._for(conn.dialect, values[0])
        cursor_execute(conn, compiled.sql, [compiled.parameters(v) for v in values],
                       many=True).close()

    def _for(self, dialect: Dialect, values: Mapping[str, Any]) -> _Compiled:
        # An insert's columns are the keys given; other statements' parameters are their own.
        columns = tuple(sorted(values)) if isinstance(self._statement, Insert) else ()
        key = (dialect.name, columns)
        found = self._compiled.get(key)
        if found is None:
            found = self._compiled[key] = _compile(self._statement, dialect, columns)
        return found


def _compile(statement: ClauseElement, dialect: Dialect, columns: tuple[str, ...]) -> _Compiled:
    compiled = statement.compile(dialect=dialect, column_keys=list(columns) or None)
    assert isinstance(compiled, SQLCompiler)
    if compiled.insert_prefetch or compiled.update_prefetch:
        # Column defaults SQLAlchemy computes around its own execute: not run here.
        raise TypeError(f"{statement} needs SQLAlchemy's column defaults: run it with execute")
    positional = bool(compiled.positional)
    names = tuple(compiled.positiontup or ()) if positional else tuple(compiled.params)
    binds = tuple(compiled.binds[name].type.dialect_impl(dialect).bind_processor(dialect)
                  for name in names)
    fixed = {name: bind.value for name, bind in compiled.binds.items() if not bind.required}
    returned = getattr(statement, "exported_columns", ())
    results = tuple(column.type.dialect_impl(dialect).result_processor(dialect, None)
                    for column in returned)
    return _Compiled(compiled.string, names, positional, binds, fixed, results)
