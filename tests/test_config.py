"""Settings: defaults, POOLD_ environment, the TOML file, CLI overrides, and bad values."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from poold.config import load_settings
from poold.types import GiB, MiB, format_size, parse_size


def test_precedence_cli_over_env_over_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    config = tmp_path / "poold.toml"
    config.write_text('listen = "127.0.0.1:9000"\nemulate_size = "2GiB"\nmax_ttl_s = 60\n'
                      f'state_dir = "{tmp_path}"\n')
    settings = load_settings(config)
    assert (settings.listen_port, settings.emulate_size, settings.max_ttl_s) == (9000, 2 * GiB, 60)
    monkeypatch.setenv("POOLD_LISTEN", "127.0.0.1:9001")
    assert load_settings(config).listen_port == 9001
    assert load_settings(config, listen="127.0.0.1:9002").listen_port == 9002
    assert load_settings(config).ledger_url == f"sqlite:///{tmp_path}/ledger.sqlite3"


def test_bad_values_are_refused(tmp_path: Path) -> None:
    config = tmp_path / "poold.toml"
    for text in ('reap_interval_s = 0\n', 'nonsense = 1\n', 'emulate_size = "lots"\n',
                 'sqlite_synchronous = "OFF"\n'):
        config.write_text(text)
        with pytest.raises((ValidationError, ValueError)):
            load_settings(config)
    with pytest.raises(FileNotFoundError):
        load_settings(tmp_path / "missing.toml")


@pytest.mark.parametrize(("text", "size"), [("64MiB", 64 * MiB), ("1G", GiB), ("1gib", GiB),
                                            ("2097152", 2 * MiB), ("4 KiB", 4096)])
def test_parse_size(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "-1", "1.5GiB", "12 parsecs", "99999999999TiB"])
def test_parse_size_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


def test_format_size() -> None:
    assert [format_size(n) for n in (GiB, 3 * MiB, 4096, 1000)] == ["1GiB", "3MiB", "4KiB",
                                                                     "1000B"]
