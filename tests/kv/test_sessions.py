"""Session holds: who holds which block, and until when."""

from __future__ import annotations

from poold.kv import SessionTable
from tests.kv.clock import FakeClock


def test_a_hold_lasts_its_ttl_and_each_key_is_held_once_per_session() -> None:
    clock = FakeClock(0)
    table = SessionTable(clock)
    assert table.hold("s", [b"a", b"b"], ttl_s=10) == [b"a", b"b"]
    assert table.hold("s", [b"b", b"c"], ttl_s=10) == [b"c"]  # b is already held
    clock.advance(9.9)
    assert table.expire() == []
    clock.advance(0.1)
    ((name, keys),) = table.expire()
    assert name == "s" and sorted(keys) == [b"a", b"b", b"c"]
    assert "s" not in table and len(table) == 0


def test_extend_pushes_the_deadline_and_never_pulls_it_in() -> None:
    clock = FakeClock(0)
    table = SessionTable(clock)
    table.hold("s", [b"a"], ttl_s=10)
    clock.advance(8)
    assert table.extend("s", ttl_s=10)  # now 18
    assert table.extend("s", ttl_s=1)   # 9 < 18: unchanged
    clock.advance(9)
    assert table.expire() == []
    clock.advance(1)
    assert [name for name, _ in table.expire()] == ["s"]
    assert not table.extend("s", ttl_s=10)


def test_end_returns_the_keys_and_forget_removes_a_key_from_every_session() -> None:
    table = SessionTable(FakeClock())
    table.hold("s1", [b"a", b"b"], ttl_s=10)
    table.hold("s2", [b"a"], ttl_s=10)
    assert table.forget(b"a") == ["s1", "s2"]
    assert table.keys_of("s1") == {b"b"} and table.keys_of("s2") == set()
    assert table.end("s1") == [b"b"]
    assert table.end("s1") == [] and table.keys_of("s1") == set()
