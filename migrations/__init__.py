"""Alembic migrations: one tree for SQLite and PostgreSQL. Run with `poold db upgrade`."""
