"""Changing capacity at run time on a real Linux 6.1 kernel: in a dynamic (hmem) dax region, poold
creates, leases from, destroys, drains and reconfigures dax devices through sysfs, and after every
step `daxctl list` in the guest and GET /v1/devices agree; refusals are 4xx naming the device and
the errno, and change neither sysfs nor the ledger (its events, leases and claims included). One
refusal is the kernel's own EBUSY: memory blocks onlined as kernel memory that hold page tables
will not offline.

One guest boot runs every step (tests/kernel/device_steps.py), because a boot and a daemon start
cost about a minute under TCG."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.kernel import qemu
from tests.kernel.qemu import MiB

GUEST_TIMEOUT_S = 600
DAEMON = """set -e
ip link set lo up 2>/dev/null || busybox ip link set lo up
export POOLD_RESCAN_INTERVAL_S=3600 POOLD_AUTH=off POOLD_ISOLATED_POOLS='{"private": 0}'
poold serve --state-dir /tmp/poold --listen 127.0.0.1:7077 --host-id guest \\
    > "$OUT/daemon.log" 2>&1 &
"""
SCRIPT = DAEMON + """python3 -m tests.kernel.device_steps "$OUT/steps.json"
poold fsck --state-dir /tmp/poold > "$OUT/fsck.json"
"""


def kernel_view(state: dict[str, Any]) -> dict[str, tuple[int, str]]:
    """daxctl's enabled devices with memory: chardev -> (size, mode)."""
    listed = state["daxctl"]
    listed = [listed] if isinstance(listed, dict) else listed  # one device prints an object
    return {d["chardev"]: (d["size"], d["mode"]) for d in listed
            if d.get("state") != "disabled" and d["size"]}


def ledger_view(state: dict[str, Any]) -> dict[str, tuple[int, str]]:
    """poold's present devices: devname -> (size, kind)."""
    return {d["devname"]: (d["size"], d["kind"]) for d in state["devices"]
            if d["state"] != "missing"}


def states(state: dict[str, Any]) -> dict[str, str]:
    return {d["devname"]: d["state"] for d in state["devices"] if d["state"] != "missing"}


def refused_cleanly(step: dict[str, Any], status: int, error: str, *words: str) -> None:
    """A refusal: its status and class, a detail naming `words` (the device, the errno), and
    daxctl, the devices and the whole ledger as they were before it."""
    name, answer = step["step"], step["answer"]
    assert (step["status"], answer.get("error")) == (status, error), (name, answer)
    missing = [w for w in words if w not in answer["detail"]]
    assert not missing, (name, missing, answer["detail"])
    for part in ("daxctl", "devices", "ledger"):
        assert step["before"][part] == step["after"][part], (name, part)


def run(scenario: str, script: str, tmp_path: Path, kernel: qemu.Kernel
        ) -> tuple[qemu.GuestResult, list[dict[str, Any]]]:
    result = qemu.run_guest(scenario, script, GUEST_TIMEOUT_S, tmp_path, kernel=kernel)
    log = result.out_dir / "daemon.log"
    assert result.returncode == 0, (result.stderr[-3000:],
                                    log.read_text()[-3000:] if log.exists() else "")
    return result, json.loads((result.out_dir / "steps.json").read_text())


def test_create_lease_destroy_drain_reconfigure(guest_kernel: qemu.Kernel,
                                                tmp_path: Path) -> None:
    result, steps = run("hmem", SCRIPT, tmp_path, guest_kernel)
    by_name: dict[str, dict[str, Any]] = {}
    for step in steps:
        # After every step, the kernel and the ledger agree.
        for when in ("before", "after"):
            assert kernel_view(step[when]) == ledger_view(step[when]), (step["step"], when)
        by_name.setdefault(step["step"], step)
    status = {s["step"]: (s["status"], s["answer"].get("error")) for s in steps
              if isinstance(s["answer"], dict)}

    assert status["empty dax0.0"] == (200, None)
    creates = [s for s in steps if s["step"] == "create"]
    assert [(s["status"], s["answer"]["devname"]) for s in creates] == [
        (201, "dax0.1"), (201, "dax0.2"), (201, "dax0.3")]
    assert ledger_view(creates[-1]["after"]) == {
        f"dax0.{i}": (256 * MiB, "devdax") for i in (1, 2, 3)}

    leased = by_name["lease on dax0.1"]
    assert leased["status"] == 201 and leased["answer"]["chardev"] == "/dev/dax0.1"
    assert leased["readback"] == "poold-device-ops" * 2

    destroyed = by_name["destroy dax0.2"]
    assert destroyed["status"] == 200 and "dax0.2" not in kernel_view(destroyed["after"])

    # The live lease's id: poold's own refusals (a lease holds the device) name it; the kernel's
    # (checked before any write, as the kernel would answer) name the errno.
    held = leased["answer"]["id"]
    refused_cleanly(by_name["destroy leased dax0.1"], 409, "DeviceBusy", "dax0.1", held)
    refused_cleanly(by_name["create too large"], 409, "RegionFull", "region0", "805306368",
                    "ENOSPC")
    refused_cleanly(by_name["destroy first device"], 409, "DeviceBusy", "dax0.0",
                    "first device", "EBUSY")
    refused_cleanly(by_name["resize misaligned"], 422, "InvalidRequest", "dax0.3", "3145728",
                    "EINVAL")
    refused_cleanly(by_name["reconfigure leased dax0.1"], 409, "DeviceBusy", "dax0.1", held)

    drain = by_name["drain dax0.1"]
    assert states(drain["after"])["dax0.1"] == "draining"
    refused_cleanly(by_name["lease on drained dax0.1"], 409, "DeviceDraining", "dax0.1",
                    "draining")
    unpinned = by_name["unpinned lease while drained"]
    room = next(d for d in unpinned["before"]["devices"] if d["devname"] == "dax0.1")
    assert room["claimed_bytes"] - room["leased_bytes"] >= 8 * MiB  # dax0.1 had room
    assert unpinned["status"] == 201 and unpinned["answer"]["device"] == "dax0.3"
    assert by_name["release unpinned"]["final"] == "released"
    renewed = by_name["keepalive while drained"]
    assert renewed["status"] == 200 and renewed["answer"]["device"] == "dax0.1"
    assert renewed["answer"]["expires_at"] > renewed["granted"]["expires_at"]
    assert by_name["release"]["answer"]["state"] in ("released", "scrubbing")
    assert by_name["release"]["final"] == "released"
    gone = by_name["destroy drained dax0.1"]
    assert gone["status"] == 200 and "dax0.1" not in kernel_view(gone["after"])

    ram = by_name["to system-ram"]
    assert ram["status"] == 200, ram["answer"]
    assert kernel_view(ram["after"])["dax0.3"] == (256 * MiB, "system-ram")
    assert ledger_view(ram["after"])["dax0.3"] == (256 * MiB, "system-ram")
    new_nodes = set(ram["after"]["nodes"]) - set(ram["before"]["nodes"])
    assert len(new_nodes) == 1 and ram["after"]["nodes"][new_nodes.pop()] == 256 * MiB
    assert len(ram["answer"]["online_blocks"]) == 2 and ram["answer"]["kernel"]["movable"]

    node = _new_node(ram)
    leased_ram = by_name["lease on system-ram dax0.3"]
    assert leased_ram["status"] == 201, leased_ram["answer"]
    memory = leased_ram["memory"]
    assert memory["readback"] == "numa-node-lease" * 2 and memory["via"] == "fd"
    assert set(memory["numa_pages"]) == {f"N{node}"}  # every page on the new node
    assert sum(memory["numa_pages"].values()) * 4096 == 8 * MiB
    assert memory["daemon_memfds"] == 1
    ended = by_name["release node lease"]
    assert ended["final"] == "released" and ended["daemon_memfds"] == 0  # dropped at its end

    back = by_name["back to devdax"]
    assert back["status"] == 200, back["answer"]
    assert back["after"]["nodes"] == ram["before"]["nodes"]  # the node went away
    assert ledger_view(back["after"])["dax0.3"] == (256 * MiB, "devdax")
    again = by_name["lease after"]
    assert again["status"] == 201 and again["readback"] == "back-from-kmem" * 2

    iso = by_name["isolated lease"]
    assert iso["status"] == 201, iso["answer"]
    lease = iso["answer"]
    assert (lease["pool"], lease["offset"], lease["length"]) == ("private", 0, 64 * MiB)
    assert kernel_view(iso["after"])[lease["device"]] == (64 * MiB, "devdax")
    assert lease["device"] not in kernel_view(iso["before"])
    assert iso["readback"] == "isolated-lease" * 2
    released = by_name["release isolated"]
    assert released["final"] == "released" and released["gone"]
    after = by_name["after isolated"]
    assert lease["device"] not in kernel_view(after["after"])
    assert lease["device"] not in ledger_view(after["after"])
    events = [(e["kind"], e["lease_id"], e["details"].get("devname"))
              for e in reversed(after["answer"])]
    scrubbed_at = events.index(("lease.scrubbed", lease["id"], None))
    # The name may have been a destroyed device's before: the last destroy is this lease's.
    destroyed_at = max(i for i, e in enumerate(events)
                       if e == ("device.destroyed", None, lease["device"]))
    assert scrubbed_at < destroyed_at  # zeroed before the device went

    # The kernel's EBUSY: the device's block, onlined as kernel memory, holds page tables.
    busy = by_name["back to devdax under kernel memory"]
    (block,) = busy["blocks"]
    assert busy["zones"] == {str(block): "Normal"} and busy["page_tables"] >= 2 * MiB
    refused_cleanly(busy, 409, "DeviceBusy", busy["devname"],
                    f"would not offline: memory{block} (EBUSY)", "EBUSY")
    assert kernel_view(busy["after"])[busy["devname"]] == (128 * MiB, "system-ram")

    assert json.loads((result.out_dir / "fsck.json").read_text())["clean"]


def _new_node(ram: dict[str, Any]) -> int:
    (name,) = set(ram["after"]["nodes"]) - set(ram["before"]["nodes"])
    return int(name.removeprefix("node"))


def test_static_region_refuses_and_changes_nothing(guest_kernel: qemu.Kernel,
                                                  tmp_path: Path) -> None:
    script = ("ndctl create-namespace -f -e namespace0.0 -m devdax\n" + DAEMON
              + 'python3 -m tests.kernel.device_steps "$OUT/steps.json" static\n')
    _result, steps = run("legacy-pmem", script, tmp_path, guest_kernel)
    names = {"create in static region": "region0", "resize in static region": "dax0.0",
             "destroy in static region": "dax0.0"}
    assert [step["step"] for step in steps] == list(names)
    for step in steps:
        # EOPNOTSUPP, which Python's errno table names by its alias ENOTSUP (95 both).
        refused_cleanly(step, 422, "InvalidRequest", names[step["step"]], "static", "ENOTSUP")
        assert kernel_view(step["after"]) == ledger_view(step["after"]) != {}
