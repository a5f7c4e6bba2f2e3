"""log_format=json: one JSON object per record, the message's key=value context lifted out."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest

from poold.config import load_settings
from poold.daemon.logs import JsonFormatter, configure_logging


def record(message: str, *args: object, **extra: object) -> logging.LogRecord:
    made = logging.LogRecord("poold.daemon.app", logging.WARNING, __file__, 1, message, args,
                             None)
    made.__dict__.update(extra)
    return made


def test_json_line_has_time_level_logger_message_and_context() -> None:
    line = JsonFormatter().format(record("daemon.started host=%s listen=%s udev=%s", "h1",
                                         "127.0.0.1:7077", True, request_id="r-9"))
    parsed = json.loads(line)
    assert parsed["time"].endswith("+00:00") and "T" in parsed["time"]
    assert (parsed["level"], parsed["logger"]) == ("WARNING", "poold.daemon.app")
    assert parsed["message"] == "daemon.started host=h1 listen=127.0.0.1:7077 udev=True"
    assert (parsed["host"], parsed["listen"], parsed["udev"]) == ("h1", "127.0.0.1:7077", "True")
    assert parsed["request_id"] == "r-9"
    assert "\n" not in line


def test_context_never_overwrites_the_fixed_fields() -> None:
    parsed = json.loads(JsonFormatter().format(record("x.y level=7 message=hi time=0")))
    assert parsed["level"] == "WARNING" and parsed["message"] == "x.y level=7 message=hi time=0"
    assert (parsed["ctx_level"], parsed["ctx_message"], parsed["ctx_time"]) == ("7", "hi", "0")


def test_exceptions_are_one_field() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        made = record("task.failed task=%s", "reaper")
        made.exc_info = sys.exc_info()
    parsed = json.loads(JsonFormatter().format(made))
    assert parsed["task"] == "reaper" and "ValueError: boom" in parsed["exception"]


def test_configure_logging_json(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        configure_logging("INFO", "json")
        logging.getLogger("poold.test").info("thing.done n=%d", 3)
        logging.getLogger("poold.test").debug("hidden")
        lines = capsys.readouterr().err.splitlines()
        assert [json.loads(x)["n"] for x in lines] == ["3"]
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


def test_log_format_setting_is_text_or_json(monkeypatch: pytest.MonkeyPatch, tmp_path: Path
                                            ) -> None:
    config = tmp_path / "poold.toml"
    config.write_text("")
    assert load_settings(config).log_format == "text"
    monkeypatch.setenv("POOLD_LOG_FORMAT", "json")
    assert load_settings(config).log_format == "json"
    monkeypatch.setenv("POOLD_LOG_FORMAT", "xml")
    with pytest.raises(ValueError):
        load_settings(config)
