"""A writable copy of a recorded sysfs tree that answers writes the way Linux 6.1 does.

The seam is `Sysfs.write`: the drivers write attributes through it, and this fake changes the tree
as the kernel would (drivers/dax/bus.c, drivers/dax/kmem.c, drivers/base/memory.c) or raises the
errno the kernel would. Only the attributes poold writes are modelled:

- dax_region/create (a new size-0 device, ENOSPC when nothing is available), dax_region/delete
  (EBUSY for a bound or sized device and for daxN.0);
- a device's size (EBUSY while bound, EINVAL misaligned, ENOSPC past available_size) and align;
- a device's mapping (a physical range `start-end`, hex, end inclusive: ENXIO misaligned, ENOMEM
  outside the region or over another device's range);
- bind, unbind, new_id, remove_id of device_dax and kmem (kmem hot-adds the memory blocks, offline);
- memory blocks' state (online_movable and online_kernel, which set the zone valid_zones shows;
  offline; `stuck` blocks refuse to offline with EBUSY).

`fail` injects an errno for any write whose path ends with a given suffix. `misread` makes the next
write to such a path succeed and then the attribute read back another value (a kernel that
rounded or ignored it); `ignore` makes such writes succeed and change nothing (a bind whose probe
never attached the driver).
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from drivers.errors import KernelRefused
from drivers.sysfs import Sysfs
from tests.sysfs_trees import extract

REGION = "devices/platform/hmem.0"
BLOCK = 128 << 20


def _oserror(code: int) -> OSError:
    return OSError(code, os.strerror(code))


class FakeKernel(Sysfs):
    def __init__(self, tree: str, tmp_path: Path) -> None:
        source = extract(tree, tmp_path / "recorded") / "sys"
        root = tmp_path / "sys"
        shutil.copytree(source, root, symlinks=True)
        super().__init__(root)
        self.fail: dict[str, int] = {}
        self.misread: dict[str, str] = {}
        self.ignore: set[str] = set()
        self.stuck: set[int] = set()
        self.writes: list[tuple[str, str]] = []
        self.kmem_ids: set[str] = set()

    # ------------------------------------------------------------------ the seam

    def write(self, path: Path, value: str, device: str) -> None:
        rel = str(path.relative_to(self.root))
        self.writes.append((rel, value))
        try:
            for suffix, code in self.fail.items():
                if rel.endswith(suffix):
                    raise _oserror(code)
            if any(rel.endswith(suffix) for suffix in self.ignore):
                return
            self._apply(rel, value.strip())
            for suffix in [s for s in self.misread if rel.endswith(s)]:
                path.write_text(self.misread.pop(suffix) + "\n")  # once: the undo reads true
        except OSError as exc:
            raise KernelRefused(device, str(path), exc.errno or 0,
                                f"writing {value!r} refused: {exc.strerror}") from exc

    def snapshot(self) -> dict[str, str]:
        """Every regular file's text and every link's target: to prove a refusal changed nothing."""
        found = {}
        for path in sorted(self.root.rglob("*")):
            rel = str(path.relative_to(self.root))
            if rel.endswith(("dax_region/create", "uevent")) or "/power/" in rel:
                continue  # the youngest device's name, and what the fake does not model
            if path.is_symlink():
                found[rel] = "-> " + os.readlink(path)
            elif path.is_file():
                found[rel] = path.read_text()
        return found

    # ------------------------------------------------------------------ kernel behaviour

    def _apply(self, rel: str, value: str) -> None:
        parts = rel.split("/")
        if rel == f"{REGION}/dax_region/create":
            self._create(value)
        elif rel == f"{REGION}/dax_region/delete":
            self._delete(value)
        elif parts[:3] == ["bus", "dax", "devices"] and parts[4] == "size":
            self._resize(parts[3], int(value, 0))
        elif parts[:3] == ["bus", "dax", "devices"] and parts[4] == "align":
            self._align(parts[3], int(value, 0))
        elif parts[:3] == ["bus", "dax", "devices"] and parts[4] == "mapping":
            self._mapping(parts[3], value)
        elif parts[:3] == ["bus", "dax", "drivers"]:
            getattr(self, f"_{parts[4]}")(parts[3], value)
        elif parts[:3] == ["devices", "system", "memory"] and parts[4] == "state":
            self._block_state(int(parts[3].removeprefix("memory")), value)
        else:
            raise _oserror(errno.EACCES)

    def _dev(self, name: str) -> Path:
        path = self.root / REGION / name
        if not path.is_dir():
            raise _oserror(errno.ENODEV)
        return path

    def _attr(self, path: Path, name: str) -> int:
        return int((path / name).read_text().strip(), 0)

    def _driver(self, name: str) -> str | None:
        link = self._dev(name) / "driver"
        return os.path.basename(os.readlink(link)) if link.is_symlink() else None

    def _region_attr(self, name: str) -> int:
        return self._attr(self.root / REGION / "dax_region", name)

    def _devices(self) -> list[Path]:
        return sorted(p for p in (self.root / REGION).iterdir() if p.name.startswith("dax0."))

    def _ranges(self, skip: str | None = None) -> list[tuple[int, int]]:
        used = []
        for dev in self._devices():
            mapping = dev / "mapping0"
            if dev.name != skip and mapping.is_dir():
                used.append((self._attr(mapping, "start"), self._attr(mapping, "end") + 1))
        return sorted(used)

    def _available(self) -> int:
        return self._region_attr("size") - sum(end - start for start, end in self._ranges())

    def _set_available(self) -> None:
        (self.root / REGION / "dax_region" / "available_size").write_text(
            f"{self._available()}\n")

    def _create(self, value: str) -> None:
        if value != "1":
            raise _oserror(errno.EINVAL)
        if self._available() == 0:
            raise _oserror(errno.ENOSPC)
        taken = {int(p.name.split(".")[1]) for p in self._devices()}
        name = f"dax0.{min(set(range(1, len(taken) + 2)) - taken)}"
        template = self.root / REGION / "dax0.0"
        dev = self.root / REGION / name
        dev.mkdir()
        for attr in ("target_node", "numa_node", "modalias"):
            shutil.copy(template / attr, dev / attr)
        (dev / "align").write_text(f"{self._region_attr('align')}\n")
        (dev / "size").write_text("0\n")
        (dev / "mapping").write_text("")
        (self.root / "bus/dax/devices" / name).symlink_to(f"../../../{REGION}/{name}")
        (self.root / REGION / "dax_region" / "create").write_text(f"{name}\n")

    def _delete(self, name: str) -> None:
        dev = self._dev(name)
        if self._driver(name) is not None or self._attr(dev, "size") or name.endswith(".0"):
            raise _oserror(errno.EBUSY)
        shutil.rmtree(dev)
        (self.root / "bus/dax/devices" / name).unlink()

    def _resize(self, name: str, size: int) -> None:
        dev = self._dev(name)
        if self._driver(name) is not None:
            raise _oserror(errno.EBUSY)
        if size % self._attr(dev, "align"):
            raise _oserror(errno.EINVAL)
        old = self._attr(dev, "size")
        if size > old and size - old > self._available():
            raise _oserror(errno.ENOSPC)
        mapping = dev / "mapping0"
        start = self._attr(mapping, "start") if mapping.is_dir() else self._gap(size, name)
        if any(s < start + size and start < e for s, e in self._ranges(skip=name)):
            raise _oserror(errno.ENOSPC)  # the fake only grows in place
        shutil.rmtree(mapping, ignore_errors=True)
        if size:
            end = start + size
            mapping.mkdir()
            for attr, val in (("page_offset", 0), ("start", start), ("end", end - 1)):
                (mapping / attr).write_text(f"{val:#x}\n" if attr != "page_offset" else "0x0\n")
        (dev / "size").write_text(f"{size}\n")
        self._set_available()

    def _mapping(self, name: str, value: str) -> None:
        dev = self._dev(name)
        try:
            first, last = (int(x, 16) for x in value.split("-"))
        except ValueError:
            raise _oserror(errno.EINVAL) from None
        size = last - first + 1
        if size <= 0 or size % self._attr(dev, "align") or (dev / "mapping0").is_dir():
            raise _oserror(errno.ENXIO)  # the fake holds one range per device
        region = self._attr(self.root / REGION / "dax0.0", "resource")
        inside = region <= first and last < region + self._region_attr("size")
        if not inside or any(s <= last and first < e for s, e in self._ranges(skip=name)):
            raise _oserror(errno.ENOMEM)  # __request_region found it taken
        mapping = dev / "mapping0"
        mapping.mkdir()
        for attr, val in (("page_offset", 0), ("start", first), ("end", last)):
            (mapping / attr).write_text(f"{val:#x}\n")
        (dev / "size").write_text(f"{size}\n")
        self._set_available()

    def _gap(self, size: int, name: str) -> int:
        start = self._attr(self.root / REGION / "dax0.0", "resource")
        for s, e in self._ranges(skip=name):
            if start + size <= s:
                break
            start = max(start, e)
        return start

    def _align(self, name: str, align: int) -> None:
        dev = self._dev(name)
        if self._driver(name) is not None:
            raise _oserror(errno.EBUSY)
        if align not in (4096, 2 << 20, 1 << 30) or self._attr(dev, "size") % align:
            raise _oserror(errno.EINVAL)
        (dev / "align").write_text(f"{align}\n")

    def _bind(self, driver: str, name: str) -> None:
        dev = self._dev(name)
        if self._driver(name) is not None:
            raise _oserror(errno.EBUSY)
        if driver == "kmem" and name not in self.kmem_ids:
            raise _oserror(errno.ENODEV)
        if not self._attr(dev, "size"):
            raise _oserror(errno.ENXIO)
        (dev / "driver").symlink_to(f"../../../../bus/dax/drivers/{driver}")
        (self.root / "bus/dax/drivers" / driver / name).symlink_to(f"../../../../{REGION}/{name}")
        if driver == "kmem":
            self._hot_add(dev)

    def _unbind(self, driver: str, name: str) -> None:
        dev = self._dev(name)
        if self._driver(name) != driver:
            raise _oserror(errno.ENODEV)
        (dev / "driver").unlink()
        (self.root / "bus/dax/drivers" / driver / name).unlink()
        if driver == "kmem":
            self._hot_remove(dev)

    def _new_id(self, driver: str, name: str) -> None:
        if driver != "kmem":
            raise _oserror(errno.EINVAL)
        self.kmem_ids.add(name)
        if self._driver(name) is None:
            self._bind(driver, name)

    def _remove_id(self, driver: str, name: str) -> None:
        if name not in self.kmem_ids:
            raise _oserror(errno.EINVAL)
        self.kmem_ids.discard(name)

    # ------------------------------------------------------------------ memory hotplug

    def _blocks(self, dev: Path) -> list[int]:
        start, end = self._attr(dev / "mapping0", "start"), self._attr(dev / "mapping0", "end")
        return list(range(-(-start // BLOCK), (end + 1) // BLOCK))

    def _node(self, dev: Path) -> int:
        return self._attr(dev, "target_node")

    def _hot_add(self, dev: Path) -> None:
        memory = self.root / "devices/system/memory"
        for index in self._blocks(dev):
            block = memory / f"memory{index}"
            block.mkdir()
            (block / "state").write_text("offline\n")
            (block / "valid_zones").write_text("Movable\n")
            (block / "phys_index").write_text(f"{index:08x}\n")
            (block / "removable").write_text("1\n")
            (block / f"node{self._node(dev)}").symlink_to(f"../../node/node{self._node(dev)}")

    def _hot_remove(self, dev: Path) -> None:
        memory = self.root / "devices/system/memory"
        blocks = [memory / f"memory{i}" for i in self._blocks(dev)]
        if any((b / "state").read_text().strip() == "online" for b in blocks):
            return  # dax_kmem: "cannot be hotremoved until the next reboot": the memory leaks
        for block in blocks:
            shutil.rmtree(block)

    def _block_state(self, index: int, value: str) -> None:
        block = self.root / f"devices/system/memory/memory{index}"
        if not block.is_dir():
            raise _oserror(errno.ENODEV)
        if value == "offline":
            if index in self.stuck:
                raise _oserror(errno.EBUSY)
            (block / "state").write_text("offline\n")
        elif value in ("online_movable", "online_kernel"):
            (block / "state").write_text("online\n")
            zone = "Movable" if value == "online_movable" else "Normal"
            (block / "valid_zones").write_text(f"{zone}\n")
        else:
            raise _oserror(errno.EINVAL)
        node = next(int(p.name[4:]) for p in block.iterdir() if p.name.startswith("node"))
        self._node_online(node)

    def _node_online(self, node: int) -> None:
        """A node is online while it has online memory (or CPUs: node 0 here)."""
        base = self.root / "devices/system"
        online = [i for i in range(64) if any(
            (b / "state").read_text().strip() == "online"
            for b in (base / "memory").glob("memory*") if (b / f"node{i}").is_symlink())]
        online = sorted({0, *online})
        (base / "node/online").write_text(",".join(map(str, online)) + "\n")
        directory = base / "node" / f"node{node}"
        if node in online:
            directory.mkdir(exist_ok=True)
            blocks = [b for b in (base / "memory").glob("memory*")
                      if (b / f"node{node}").is_symlink()
                      and (b / "state").read_text().strip() == "online"]
            kb = len(blocks) * BLOCK // 1024
            (directory / "cpulist").write_text("\n")
            (directory / "meminfo").write_text(
                f"Node {node} MemTotal: {kb} kB\nNode {node} MemFree: {kb} kB\n")
        elif node:
            shutil.rmtree(directory, ignore_errors=True)
