"""README's "Install as a service", as written, under a real systemd on a real Linux 6.1 kernel.

The host runs the README's installation of the program: its apt-get, `python3 -m venv
/opt/poold` and `/opt/poold/bin/pip install .` of a copy of this checkout, /opt being a private
overlay there (readme_install.py). A guest with a dynamic (hmem) dax region boots systemd as
PID 1 from the host's root, makes that install its /opt/poold, and runs every other command of
the README's block as written: the unit and config installed, the sed, the link, daemon-reload,
`enable --now`, status, the journal, readyz, `poold list pools`, `poold token create`. Then, under
the unit's sandbox (service_checks.sh drives it; this module judges):
- root's device operations write sysfs: resize, create, reconfigure to system-ram and back;
- an unprivileged user (nobody) with that tenant token leases over /run/poold/api.sock and maps
  through /run/poold/fd.sock: the system-ram device (a memfd the daemon bound to its node with
  mbind, under SystemCallFilter), a dax device created at run time, and the emulated device
  (each lease a sealed memfd of the daemon's), which it holds with the SDK's keepalive through
  what follows;
- `systemctl restart poold` (taking a drop-in that shortens WatchdogSec) keeps that lease: the
  new daemon renews it;
- a daemon that stops answering (SIGSTOP) is killed by the watchdog and restarted by systemd;
  the lease survives that too: renewed again, its bytes intact in the first mapping and in a
  descriptor the last daemon passes again. The lease's memfd lived on in systemd's file
  descriptor store (FileDescriptorStoreMax= in the unit): a new memfd would read zeros.

One boot runs it all: a boot costs a quarter to half a minute under TCG, each daemon start
about as much. A failure's message points at the guest's files: `journalctl -u poold`, the
boot's journal, the console.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from tests.kernel import qemu, readme_install
from tests.kernel.qemu import MiB

ROOT = Path(__file__).resolve().parents[2]
GUEST_TIMEOUT_S = 600
# Longer than any outage here (a restart, or a watchdog kill and restart, under TCG on a busy
# host: well under a minute each) plus a renewal period, so the SDK, renewing every TTL/3 and
# retrying while the daemon is away, bridges each of them.
TTL_S = 90
WATCHDOG_S = 5
HMEM = qemu.SCENARIOS["hmem"]
# Stage 2 loads only what makes the region: udev loads device_dax and kmem (both match its
# dax0.0's modalias, dax:t0*) as on a real host, where the unit's ProtectKernelModules leaves
# poold unable to load kmem for a reconfigure itself. The journal goes to the console too: a
# guest that never finishes still shows what poold said.
SCENARIO = dataclasses.replace(
    HMEM, systemd=True, modules=("dax_hmem",),
    cmdline=f"{HMEM.cmdline} systemd.journald.forward_to_console=1")
STATUS = 'Status: "serving http://127.0.0.1:7077 and /run/poold/api.sock"'


def read(result: qemu.GuestResult, name: str) -> str:
    path = result.out_dir / name
    return path.read_text(errors="replace") if path.exists() else f"<{name} missing>"


def jsonl(result: qemu.GuestResult, name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in read(result, name).splitlines() if line.startswith("{")]


def show(result: qemu.GuestResult, when: str) -> dict[str, str]:
    """`systemctl show poold` at `when`."""
    return dict(line.split("=", 1) for line in read(result, f"show-{when}.txt").splitlines())


def at(result: qemu.GuestResult, mark: str) -> float:
    return float(read(result, f"{mark}.t"))


def daxctl(result: qemu.GuestResult, op: str) -> dict[str, tuple[int, str]]:
    """daxctl's enabled devices with memory after `op`: chardev -> (size, mode)."""
    listed = json.loads(read(result, f"op-{op}.daxctl") or "[]")
    listed = [listed] if isinstance(listed, dict) else listed  # one device prints an object
    return {d["chardev"]: (d["size"], d["mode"]) for d in listed
            if d.get("state") != "disabled" and d["size"]}


def diagnosis(result: qemu.GuestResult) -> str:
    """Where to look, and the last of what poold and the guest script said."""
    (result.out_dir / "journal-boot.txt").write_text(result.journal)
    return (f"\nfiles: {result.out_dir} (journal-poold.txt, journal-boot.txt), console "
            f"{result.console_log}\n--- journalctl -u poold, last lines:\n"
            + "\n".join(read(result, "journal-poold.txt").splitlines()[-40:])
            + f"\n--- guest script stderr:\n{result.stderr[-2000:]}")


def run_readme(tmp_path: Path, kernel: qemu.Kernel
               ) -> tuple[qemu.GuestResult, list[readme_install.Command]]:
    steps = readme_install.commands(ROOT / "README.md")
    checkout = readme_install.copy_checkout(ROOT, tmp_path / "checkout")
    prefix, _ = readme_install.install_on_host([s for s in steps if s.on_host], checkout,
                                               tmp_path)
    assert (prefix / "bin" / "poold").read_text().startswith("#!/opt/poold/bin/python")
    in_guest = [s for s in steps if not s.on_host]
    token = next(s for s in in_guest if s.words[:3] == ("poold", "token", "create"))
    # First a booted host: udev's coldplug done, device_dax and kmem loaded by it. The guest is
    # emulated (TCG), ten to fifty times slower than a real machine, more when the host is
    # loaded: a cold start (imports, migrations) can outlast systemd's default 90 s start
    # timeout, so a system-wide default (not the unit under test) allows it ten minutes.
    script = ("udevadm settle --timeout=180\n"
              "mkdir -p /etc/systemd/system.conf.d\n"
              "printf '[Manager]\\nDefaultTimeoutStartSec=600s\\n' "
              "> /etc/systemd/system.conf.d/emulated-guest.conf\n"
              "systemctl daemon-reexec\n"
              + readme_install.guest_script(in_guest, prefix)
              + f"export TTL={TTL_S} WATCHDOG={WATCHDOG_S} TOKEN_OUT=readme-{token.index}.out\n"
              + ". tests/kernel/service_checks.sh\n")
    result = qemu.run_guest(SCENARIO, script, GUEST_TIMEOUT_S, tmp_path / "guest",
                            kernel=kernel, cwd=checkout)
    print(f"guest ran {result.wall_s:.0f}s")
    return result, in_guest


def check_readme_steps(result: qemu.GuestResult, steps: list[readme_install.Command],
                       why: str) -> None:
    """Every command exits 0 and says what the README says it does."""
    for step in steps:
        rc = read(result, f"readme-{step.index}.rc").strip()
        assert rc == "0", (step.line, rc, read(result, f"readme-{step.index}.out"), why)
    said = {s.words[:2]: read(result, f"readme-{s.index}.out") for s in steps}
    status = said[("systemctl", "status")]
    assert "Active: active (running)" in status and STATUS in status, (status, why)
    assert "daemon.started" in said[("journalctl", "-u")]
    assert json.loads(said[("curl", "-s")])["status"] == "ready"
    pools = [line.split() for line in said[("poold", "list")].splitlines()]
    assert pools[0][:2] == ["NAME", "DEVICES"], pools
    # The emulated device (1 GiB, the sed) and the hmem region's dax0.0 (1 GiB).
    assert [row[:3] for row in pools[1:]] == [["default", "2", "2GiB"]], pools
    issued = json.loads(said[("poold", "token")])
    assert issued["bearer"].startswith("pd_") and issued["role"] == "tenant", issued


def check_started(result: qemu.GuestResult) -> None:
    started = show(result, "started")
    assert (started["ActiveState"], started["SubState"]) == ("active", "running"), started
    assert started["WatchdogUSec"] == "30s" and read(result, "readyz-started.code") == "200"
    modes = {line.split()[2]: line.split()[:2] for line in read(result, "stat.txt").splitlines()}
    assert modes["/var/lib/poold"] == ["700", "root"]
    assert modes["/var/lib/poold/admin.token"] == ["600", "root"]
    assert modes["/run/poold"] == ["755", "root"]
    assert modes["/run/poold/api.sock"][0] == modes["/run/poold/fd.sock"][0] == "666"


# service_checks.sh's device operations: name, HTTP status, device, daxctl's view after it.
OPS = [("resize", 200, "dax0.0", None), ("create-1", 201, "dax0.1", (256 * MiB, "devdax")),
       ("create-2", 201, "dax0.2", (256 * MiB, "devdax")),
       ("to-ram", 200, "dax0.1", (256 * MiB, "system-ram")),
       # After nobody's lease on the system-ram device ended.
       ("to-devdax", 200, "dax0.1", (256 * MiB, "devdax"))]


def check_device_ops(result: qemu.GuestResult, ops: list[tuple[str, int, str, Any]],
                     why: str) -> None:
    """Each answered as on an unconfined daemon, and daxctl agrees."""
    for name, code, dev, view in ops:
        answer = read(result, f"op-{name}.json")
        assert read(result, f"op-{name}.code") == str(code), (name, answer, why)
        assert json.loads(answer)["devname"] == dev, (name, answer)
        assert daxctl(result, name).get(dev) == view, (name, daxctl(result, name))


def check_unprivileged_leases(result: qemu.GuestResult, why: str) -> None:
    """nobody's leases, every one mapped through fd.sock."""
    node = json.loads(read(result, "op-create-1.json"))["kernel"]["target_node"]
    held = jsonl(result, "hold.jsonl")
    once = {r["lease"]["device"]: r for r in held if r["event"] == "once"}
    assert set(once) == {"dax0.1", "dax0.2"}, (held, read(result, "hold.err"), why)
    ram, dax = once["dax0.1"], once["dax0.2"]
    assert ram["via"] == "fd" and ram["readback"] == "numa-node-lease" * 2, ram
    assert set(ram["numa_pages"]) == {f"N{node}"}, ram  # a memfd bound to the new node
    assert sum(ram["numa_pages"].values()) * 4096 == 8 * MiB
    assert dax["via"] == "fd" and dax["readback"] == "devdax-lease" * 2, dax
    assert dax["lease"]["chardev"] == "/dev/dax0.2"
    assert ram["final"] == dax["final"] == "released"
    (mapped,) = [r for r in held if r["event"] == "mapped"]
    assert mapped["via"] == "fd" and mapped["lease"]["ttl_s"] == TTL_S
    # Its memory is a memfd of the daemon's, reached by fd.sock (root alone opens its path).
    assert mapped["lease"]["chardev"] == "memfd:emu0"
    assert mapped["lease"]["map_path"].startswith("/proc/")


def check_restarts(result: qemu.GuestResult, why: str) -> None:
    """`systemctl restart` makes a new daemon with the drop-in; the watchdog kills one that
    stopped answering, systemd starts another; both keep nobody's lease alive and renewed."""
    assert read(result, "restart.rc").strip() == "0", why
    before, restarted = show(result, "before-restart"), show(result, "restarted")
    assert restarted["ActiveState"] == "active" and restarted["MainPID"] != before["MainPID"]
    assert restarted["WatchdogUSec"] == f"{WATCHDOG_S}s"
    assert read(result, "readyz-restarted.code") == "200"

    assert read(result, "watchdog.rc").strip() == "0", why
    watchdog = show(result, "watchdog")
    assert watchdog["MainPID"] != restarted["MainPID"] and watchdog["NRestarts"] == "1", watchdog
    journal = read(result, "journal-poold.txt")
    # Killed as unresponsive, not for some other failure.
    assert f"Watchdog timeout (limit {WATCHDOG_S}s)!" in journal, why
    assert "Failed with result 'watchdog'" in journal, why
    assert read(result, "readyz-watchdog.code") == "200"

    assert read(result, "hold.rc").strip() == "0", (read(result, "hold.err"), why)
    held = jsonl(result, "hold.jsonl")
    renewals = [r["t"] for r in held if r["event"] == "renewed"]
    assert any(at(result, "restart-end") < t < at(result, "stop-begin") for t in renewals), held
    assert any(t > at(result, "watchdog-end") for t in renewals), held
    done = held[-1]
    assert done["event"] == "done" and done["state_before_release"] == "active", done
    assert done["first_mapping"] == done["second_mapping"] == "held-across-restarts" * 2
    assert done["via"] == "fd" and done["released"] in ("released", "scrubbing")


def test_install_as_a_service_as_written(guest_kernel: qemu.Kernel, tmp_path: Path) -> None:
    qemu.ensure_tools("curl", "systemd")
    result, in_guest = run_readme(tmp_path, guest_kernel)
    why = diagnosis(result)
    assert result.returncode == 0, why
    check_readme_steps(result, in_guest, why)
    check_started(result)
    check_device_ops(result, OPS[:-1], why)
    check_unprivileged_leases(result, why)
    check_device_ops(result, OPS[-1:], why)
    check_restarts(result, why)
