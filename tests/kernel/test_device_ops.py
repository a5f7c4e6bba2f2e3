"""Dynamic dax regions on a real Linux 6.1 kernel.

Carved per lease, the default: every lease is a dax device of exactly its range; the descriptor
a holder gets reaches nothing past it; revoking the lease zeroes and destroys the device, after
which the holder's old mapping faults (SIGBUS) and the next lease there reads zeros; the grant
latency this costs is measured beside the emulated device's.

Carved by hand (`manual_regions`): poold creates, leases from, destroys, drains and reconfigures
dax devices through sysfs, and after every step `daxctl list` in the guest and GET /v1/devices
agree; refusals are 4xx naming the device and the errno, and change neither sysfs nor the ledger
(its events, leases and claims included). One refusal is the kernel's own EBUSY: memory blocks
onlined as kernel memory that hold page tables will not offline.

One guest boot runs every step of a scenario (tests/kernel/device_steps.py), because a boot and a
daemon start cost about a minute under TCG."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.kernel import qemu
from tests.kernel.qemu import MiB

GUEST_TIMEOUT_S = 600
DAEMON = """set -e
ip link set lo up 2>/dev/null || busybox ip link set lo up
export POOLD_RESCAN_INTERVAL_S=3600 POOLD_AUTH=off POOLD_MANUAL_REGIONS='["dax0"]'
poold serve --state-dir /tmp/poold --listen 127.0.0.1:7077 --host-id guest \\
    > "$OUT/daemon.log" 2>&1 &
"""
# The default: no manual region; an emulated device beside, for the latency's comparison.
PER_LEASE = """set -e
ip link set lo up 2>/dev/null || busybox ip link set lo up
export POOLD_RESCAN_INTERVAL_S=3600 POOLD_AUTH=off POOLD_RUNTIME_DIR=/tmp/poold
poold serve --state-dir /tmp/poold --listen 127.0.0.1:7077 --host-id guest --emulate 256MiB \\
    > "$OUT/daemon.log" 2>&1 &
python3 -m tests.kernel.device_steps "$OUT/steps.json" per-lease
poold fsck --state-dir /tmp/poold > "$OUT/fsck.json"
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

    # The kernel's EBUSY: the device's block, onlined as kernel memory, holds page tables.
    busy = by_name["back to devdax under kernel memory"]
    (block,) = busy["blocks"]
    assert busy["zones"] == {str(block): "Normal"} and busy["page_tables"] >= 2 * MiB
    refused_cleanly(busy, 409, "DeviceBusy", busy["devname"],
                    f"would not offline: memory{block} (EBUSY)", "EBUSY")
    assert kernel_view(busy["after"])[busy["devname"]] == (128 * MiB, "system-ram")

    assert json.loads((result.out_dir / "fsck.json").read_text())["clean"]


def test_each_lease_its_own_device_whose_end_faults_old_mappings(
        guest_kernel: qemu.Kernel, tmp_path: Path) -> None:
    result, steps = run("hmem", PER_LEASE, tmp_path, guest_kernel)
    by_name = {step["step"]: step for step in steps}
    start = by_name["start"]["after"]
    # The region is one ledger device; its first device was emptied (the kernel keeps it).
    assert ledger_view(start) == {"dax0": (1024 * MiB, "dax-region"),
                                  "emu0": (256 * MiB, "emulated")}
    assert kernel_view(start) == {}

    leased = by_name["lease"]
    lease = leased["answer"]
    assert leased["status"] == 201, lease
    devname = lease["map_path"].removeprefix("/dev/")
    listed = leased["kernel"]
    listed = [listed] if isinstance(listed, dict) else listed
    (device,) = [d for d in listed if d["chardev"] == devname]
    assert device["size"] == 64 * MiB and device["mode"] == "devdax"
    (mapping,) = device["mappings"]
    assert mapping["end"] - mapping["start"] + 1 == 64 * MiB
    # What the holder was handed reaches its lease and nothing past it: a byte past its end
    # faults.
    assert leased["holder"] == {"map_offset": 0, "beyond": "SIGBUS"}, leased["holder"]

    revoked = by_name["revoke"]
    assert revoked["final"] == "revoked" and revoked["gone"]
    # The device went: the old mapping faults (SIGBUS) instead of reading anyone's bytes.
    assert revoked["holder_status"] == -7 and revoked["holder_read"] == "", revoked
    again = by_name["next lease"]
    assert again["answer"]["offset"] == lease["offset"] and again["zeros"]  # zeroed before reuse
    events = [(e["kind"], e["lease_id"]) for e in reversed(by_name["events"]["answer"])]
    assert events.index(("lease.scrubbed", lease["id"])) > events.index(
        ("lease.revoked", lease["id"]))

    # What carving costs a grant: a device made (create, align, mapping, bind) per lease.
    latency = by_name["grant latency"]["seconds"]
    ratio = sorted(latency["dax0"])[4] / sorted(latency["emu0"])[4]
    print(f"grant latency, median of 8: per-lease dax {sorted(latency['dax0'])[4] * 1e3:.1f} ms,"
          f" emulated {sorted(latency['emu0'])[4] * 1e3:.1f} ms ({ratio:.1f}x)")
    (result.out_dir / "grant-latency.json").write_text(json.dumps(latency))
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
