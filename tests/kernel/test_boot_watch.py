"""run_guest boots again when the kernel stalls before /init, and only then (no QEMU needed: a
shell stands in for it, writing the console log as QEMU would)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.kernel import qemu


@pytest.fixture(autouse=True)
def short_stall(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(qemu, "BOOT_STALL_S", 1)


def fake_qemu(console: Path, script: str) -> subprocess.Popen[str]:
    return subprocess.Popen(["sh", "-c", script, "sh", str(console)], text=True,
                            start_new_session=True)  # as run_guest starts QEMU


def test_a_kernel_silent_before_init_is_stopped(tmp_path: Path) -> None:
    console = tmp_path / "console.log"
    proc = fake_qemu(console, 'echo "[    1.46] IP idents hash table entries" > "$1"; sleep 60')
    started = time.monotonic()
    assert qemu._watch_boot(proc, console, limit_s=30)
    assert proc.poll() is not None and time.monotonic() - started < 20


def test_a_guest_past_init_is_left_to_finish(tmp_path: Path) -> None:
    """Silent for longer than the stall limit once /init ran (a slow guest script): waited."""
    console = tmp_path / "console.log"
    proc = fake_qemu(console, f'echo "[    2.73] {qemu._INIT_STARTED}" > "$1"; sleep 3')
    assert not qemu._watch_boot(proc, console, limit_s=30)
    assert proc.returncode == 0


def test_a_booting_kernel_that_keeps_printing_is_not_stalled(tmp_path: Path) -> None:
    console = tmp_path / "console.log"
    proc = fake_qemu(console, 'for i in 1 2 3 4 5 6; do echo "[ $i.0] booting" >> "$1"; '
                              'sleep 0.5; done')
    assert not qemu._watch_boot(proc, console, limit_s=30)


def test_run_guest_boots_again_after_a_stall_and_gives_up_after_the_last(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    boots: list[int] = []

    def boot(*_args: object) -> object:
        boots.append(1)
        (tmp_path / "console.log").write_text("[ 1.4] stuck\n")
        return "the result" if len(boots) == 2 else None
    monkeypatch.setattr(qemu, "_boot_and_run", boot)
    kernel = qemu.Kernel("0", tmp_path, tmp_path)  # never booted: _boot_and_run stands in
    assert qemu.run_guest("hmem", "true", workdir=tmp_path, kernel=kernel) == "the result"
    assert len(boots) == 2 and (tmp_path / "console.stalled-1.log").exists()

    boots.clear()
    monkeypatch.setattr(qemu, "_boot_and_run", lambda *_args: boot() and None)
    with pytest.raises(qemu.GuestError, match="stalled before starting /init"):
        qemu.run_guest("hmem", "true", workdir=tmp_path, kernel=kernel)
    assert len(boots) == qemu.BOOTS
