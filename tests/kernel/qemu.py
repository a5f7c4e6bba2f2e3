"""Boot Debian's 6.1 kernel under QEMU with emulated CXL Type-3 / DAX set-ups; run a script in it.

Owns: installing the host tools (apt), fetching and caching the kernel and a tiny initramfs, the
scenario topologies (QEMU arguments, kernel command line, memory layout), and one bounded guest run
that brings back the script's exit status, output and result files. Leaves alone: what the guest
script does and what the tests assert; nothing here knows about poold.

How a guest works (see shared/reference/kernel-cxl-qemu.md for why each step is needed):
- a busybox initramfs loads the virtio/9p/overlay modules (Debian builds them as modules), mounts
  the host's `/` read-only over 9p with a tmpfs overlay on top, and switch_roots into it, so the
  host's python3, venv, ndctl, daxctl and cxl run unchanged in the guest at the same paths;
- a generated stage-2 script (a host file, read through that root) mounts a second, writable 9p
  share, loads the CXL/DAX modules (no udev in the guest), runs the caller's script in the host's
  cwd with $OUT set, records its exit status, and powers off through sysrq;
- or, for a scenario with `systemd=True`, stage 2 does the same set-up and then execs the host's
  systemd as PID 1, which runs the script as a unit of its own (so journald and udev run and the
  script can drive systemctl) and brings the boot's journal back with the script's status.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

APT_PACKAGES = ("qemu-system-x86", "ndctl", "daxctl", "busybox-static", "kmod", "cpio")

# Loaded by the initramfs, in dependency order, to reach the 9p root and the overlay on it.
BOOT_MODULES = ("virtio_pci", "9pnet_virtio", "9p", "overlay")
# Loaded in the guest by modprobe: udev would do it on a real machine.
CXL_MODULES = (
    "cxl_acpi", "cxl_pci", "cxl_mem", "cxl_pmem", "nd_pmem", "dax_pmem", "device_dax", "kmem",
)
P9_OPTS = "trans=virtio,version=9p2000.L,msize=262144"
MiB = 1 << 20
GiB = 1 << 30


class HarnessUnavailable(RuntimeError):
    """The host cannot run guests (not root, no apt): tests skip on this, unless required."""


class GuestError(RuntimeError):
    """A guest did not finish its script: timeout, kernel panic, QEMU refused to start."""


# ---------------------------------------------------------------- host tools and the kernel


def _run(*cmd: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


@functools.cache
def _apt_update() -> None:
    """Once per process: a fresh machine has no package lists, and apt-cache needs them too."""
    _run("apt-get", "update", "-qq")


def missing_packages(packages: tuple[str, ...] = APT_PACKAGES) -> list[str]:
    def installed(pkg: str) -> bool:
        query = ["dpkg-query", "-W", "-f=${db:Status-Status}", pkg]
        done = subprocess.run(query, capture_output=True, text=True)
        return done.stdout == "installed"

    return [pkg for pkg in packages if not installed(pkg)]


def ensure_tools(*extra: str) -> None:
    """Install the missing host packages (APT_PACKAGES and `extra`, those a test needs besides);
    raise HarnessUnavailable where that is impossible."""
    if os.geteuid() != 0:
        raise HarnessUnavailable("the QEMU kernel tier needs root (apt-get, 9p export of /)")
    if shutil.which("apt-get") is None or shutil.which("dpkg-query") is None:
        raise HarnessUnavailable("the QEMU kernel tier needs apt-get (a Debian host)")
    missing = missing_packages((*APT_PACKAGES, *extra))
    if missing:
        _apt_update()
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        _run("apt-get", "install", "-y", "-qq", *missing, env=env)


def _kernel_package() -> str:
    """The linux-image-6.1.0-N-amd64 that the linux-image-amd64 meta-package points at now."""
    for attempt in range(2):
        out = subprocess.run(["apt-cache", "depends", "linux-image-amd64"],
                             capture_output=True, text=True).stdout
        found = re.search(r"Depends: (linux-image-6\.1\.0-[\w.-]+-amd64)\s", out)
        if found:
            return found.group(1)
        if attempt == 0:
            _apt_update()
    raise RuntimeError(f"apt-cache does not know linux-image-amd64's 6.1 kernel:\n{out}")


@dataclass(frozen=True)
class Kernel:
    version: str  # e.g. 6.1.0-57-amd64
    tree: Path  # the extracted package: boot/vmlinuz-*, lib/modules/<version>
    initramfs: Path

    @property
    def vmlinuz(self) -> Path:
        return self.tree / "boot" / f"vmlinuz-{self.version}"

    @property
    def modules(self) -> Path:
        return self.tree / "lib" / "modules" / self.version


def default_cache_dir() -> Path:
    return Path(os.environ.get("POOLD_QEMU_CACHE", "~/.cache/poold-qemu")).expanduser()


def prepare_kernel(cache_dir: Path | None = None) -> Kernel:
    """Download, extract, depmod the kernel and build the initramfs, once per kernel version."""
    package = _kernel_package()
    version = package.removeprefix("linux-image-")
    final = (cache_dir or default_cache_dir()) / version
    kernel = Kernel(version, final / "tree", final / "initramfs.cpio.gz")
    if (final / "complete").exists():
        return kernel
    # Build beside the final place and rename, so an interrupted build never looks complete.
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{version}.", dir=final.parent))
    # Sandbox user root: _apt cannot write into root's cache dir, which only makes apt warn.
    _run("apt-get", "download", "-o", "APT::Sandbox::User=root", package, cwd=work)
    (deb,) = work.glob("*.deb")
    _run("dpkg", "-x", str(deb), str(work / "tree"))
    deb.unlink()
    _run("depmod", "-b", str(work / "tree"), version)
    building = Kernel(version, work / "tree", work / "initramfs.cpio.gz")
    _build_initramfs(building)
    (work / "complete").touch()
    shutil.rmtree(final, ignore_errors=True)
    work.rename(final)
    return kernel


def _module_load_order(modules_dir: Path, names: tuple[str, ...]) -> list[Path]:
    """The .ko files for `names` and their dependencies, dependencies first (from modules.dep)."""
    deps: dict[str, list[str]] = {}
    for line in (modules_dir / "modules.dep").read_text().splitlines():
        path, _, needs = line.partition(":")
        deps[path] = needs.split()
    by_name = {Path(p).name.removesuffix(".ko").replace("-", "_"): p for p in deps}
    builtin = {Path(p).name.removesuffix(".ko").replace("-", "_")
               for p in (modules_dir / "modules.builtin").read_text().split()}
    order: list[str] = []

    def visit(path: str) -> None:
        if path not in order:
            for dep in deps[path]:
                visit(dep)
            order.append(path)

    for name in names:
        if name in by_name:
            visit(by_name[name])
        elif name not in builtin:
            raise RuntimeError(f"module {name} is neither in modules.dep nor built in")
    return [modules_dir / p for p in order]


INIT = """#!/bin/busybox sh
# poold initramfs: reach the host's / over 9p, overlay it with tmpfs, switch_root into it.
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sysfs /sys; mount -t devtmpfs devtmpfs /dev
for ko in $(cat /modules.load); do insmod /modules/$ko || echo "initramfs: insmod $ko failed"; done
mkdir -p /lower /rw /newroot
mount -t 9p -o ro,cache=loose,@P9@ hostroot /lower || { echo "initramfs: no 9p root"; sh; }
mount -t tmpfs -o size=512m tmpfs /rw && mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /newroot
for d in proc sys dev; do mount --move /$d /newroot/$d; done
# poold_stage2 comes from the kernel command line (unknown key=value args become init's env).
exec switch_root /newroot /bin/sh "$poold_stage2"
""".replace("@P9@", P9_OPTS)


def _build_initramfs(kernel: Kernel) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for d in ("bin", "proc", "sys", "dev", "modules"):
            (root / d).mkdir()
        shutil.copy2("/bin/busybox", root / "bin" / "busybox")  # busybox-static: no libs needed
        kos = _module_load_order(kernel.modules, BOOT_MODULES)
        for ko in kos:
            shutil.copy2(ko, root / "modules" / ko.name)
        (root / "modules.load").write_text("\n".join(ko.name for ko in kos) + "\n")
        (root / "init").write_text(INIT)
        (root / "init").chmod(0o755)
        files = subprocess.run(["find", "."], cwd=root, capture_output=True, check=True).stdout
        archive = subprocess.run(["cpio", "-o", "-H", "newc", "--quiet"], cwd=root, input=files,
                                 capture_output=True, check=True).stdout
        kernel.initramfs.write_bytes(subprocess.run(["gzip", "-1"], input=archive,
                                                    capture_output=True, check=True).stdout)


# ---------------------------------------------------------------- scenarios


@dataclass(frozen=True)
class Scenario:
    """One guest topology. `{backing}` in an argument is the run's backing-file directory."""

    machine: str  # -M
    memory: tuple[str, ...]  # -m and the NUMA layout
    devices: tuple[str, ...] = ()
    cmdline: str = ""  # kernel command line extras
    modules: tuple[str, ...] = CXL_MODULES
    systemd: bool = False  # boot systemd as init after stage 2's set-up (RUN_SYSTEMD)


def _cxl_bridge(n: int, bus_nr: int) -> tuple[str, ...]:
    """A pxb-cxl host bridge with TWO root ports, always. With one port Linux 6.1 programs a
    passthrough decoder that QEMU 7.2 does not route through: regions "work" but reads return
    zeros and writes vanish."""
    return (
        "-device", f"pxb-cxl,bus_nr={bus_nr},bus=pcie.0,id=cxl.{n}",
        "-device", f"cxl-rp,port=0,bus=cxl.{n},id=cxl{n}_rp0,chassis={n},slot=2",
        "-device", f"cxl-rp,port=1,bus=cxl.{n},id=cxl{n}_rp1,chassis={n},slot=3",
    )


def _cxl_type3(i: int, port: str, size: str = "256M") -> tuple[str, ...]:
    """A pmem Type-3 (all QEMU 7.2 emulates) backed by {backing}/cxl-mem<i>.raw. Each gets its own
    sn=: QEMU's default serial is 0 for all, and memN names follow probe order, not topology."""
    return (
        "-object", f"memory-backend-file,id=cxl-mem{i},share=on,"
                   f"mem-path={{backing}}/cxl-mem{i}.raw,size={size}",
        "-object", f"memory-backend-file,id=cxl-lsa{i},share=on,"
                   f"mem-path={{backing}}/cxl-lsa{i}.raw,size=1M",
        "-device", f"cxl-type3,bus={port},memdev=cxl-mem{i},lsa=cxl-lsa{i},id=cxl-pmem{i},"
                   f"sn={0x1000 + i}",
    )


def _cxl_machine(windows: int) -> str:
    fmws = ",".join(f"cxl-fmw.{w}.targets.0=cxl.{w + 1},cxl-fmw.{w}.size=4G"
                    for w in range(windows))
    return f"q35,cxl=on,{fmws}"


CXL_MEMORY = ("-m", "2G", "-object", "memory-backend-ram,id=m0,size=2G",
              "-numa", "node,nodeid=0,cpus=0-1,memdev=m0")
# Two NUMA nodes; memmap= then turns node 1's 1 GiB at 4G into pmem or Soft Reserved memory.
DAX_MEMORY = ("-m", "3G", "-object", "memory-backend-ram,id=m0,size=2G",
              "-object", "memory-backend-ram,id=m1,size=1G",
              "-numa", "node,nodeid=0,cpus=0-1,memdev=m0", "-numa", "node,nodeid=1,memdev=m1")

SCENARIOS: dict[str, Scenario] = {
    "cxl1": Scenario(_cxl_machine(1), CXL_MEMORY,
                     _cxl_bridge(1, 12) + _cxl_type3(0, "cxl1_rp0")),
    "cxl-interleave": Scenario(_cxl_machine(1), CXL_MEMORY,
                               _cxl_bridge(1, 12) + _cxl_type3(0, "cxl1_rp0")
                               + _cxl_type3(1, "cxl1_rp1")),
    "cxl2-bridges": Scenario(_cxl_machine(2), CXL_MEMORY,
                             _cxl_bridge(1, 12) + _cxl_bridge(2, 222)
                             + _cxl_type3(0, "cxl1_rp0") + _cxl_type3(1, "cxl2_rp0")),
    "legacy-pmem": Scenario("q35", DAX_MEMORY, cmdline="memmap=1G!4G",
                            modules=("nd_e820", *CXL_MODULES)),
    # '%4G-1+0xefffffff' re-types the range to Soft Reserved without EFI: a dynamic dax region.
    "hmem": Scenario("q35", DAX_MEMORY, cmdline="memmap=1G%4G-1+0xefffffff",
                     modules=("dax_hmem", *CXL_MODULES)),
}


# ---------------------------------------------------------------- one guest run


@dataclass(frozen=True)
class GuestResult:
    returncode: int  # the guest script's exit status
    stdout: str
    stderr: str
    console_log: Path  # the guest's serial console: kernel messages, module loading
    out_dir: Path  # what the script wrote under $OUT
    backing_dir: Path  # QEMU's backing files (cxl-mem0.raw, ...), readable after the run
    wall_s: float
    setup_log: str = field(default="", repr=False)  # modprobe and mount output in the guest
    journal: str = field(default="", repr=False)  # `journalctl -b`, where the guest ran systemd


STAGE2 = """#!/bin/sh
# poold guest stage 2, generated by tests/kernel/qemu.py; runs as init in the guest.
export PATH={path} HOME=/root OUT={out} PYTHONPATH={checkout}
SHARE={share}
mount -t 9p -o {p9} hostshare "$SHARE" > /dev/console 2>&1
{{
  ln -sfn /proc/self/fd /dev/fd  # no udev made it; bash and python process substitution need it
  mkdir -p /lib/modules/{kver} && mount --bind {modules} /lib/modules/{kver}
  modprobe -a {modules_list} && echo "stage2: modules loaded" || echo "stage2: modprobe FAILED"
}} > "$SHARE/setup.log" 2>&1
{{ cat "$SHARE/setup.log"; echo "stage2: running the guest script"; }} > /dev/console
{run}"""

RUN_SH = """cd {cwd} && /bin/sh {script} > "$SHARE/stdout" 2> "$SHARE/stderr"
echo $? > "$SHARE/returncode"
sync
echo "stage2: script finished, powering off" > /dev/console
echo o > /proc/sysrq-trigger
# Spin on a builtin: sysrq powers off asynchronously and soon takes the 9p root away, so an
# external `sleep` fails to exec, init exits, and the kernel panics on the way down.
while :; do :; done
"""

# systemd as PID 1, asked for one unit: the script's, with what a service needs by default
# (sysinit.target: journald, udev, tmpfiles), never the host's enabled services. Units and
# overrides go to the tmpfs overlay: the host's /etc is untouched.
RUN_SYSTEMD = """mkdir -p /etc/systemd/system /etc/tmpfiles.d
# tmp.conf's 'D /tmp' would empty /tmp at boot, where this run's scripts and share are.
: > /etc/tmpfiles.d/tmp.conf
cat > /etc/systemd/system/poold-guest.service <<'EOF'
[Unit]
Description=poold guest script (tests/kernel/qemu.py), then power off
[Service]
Type=oneshot
TimeoutStartSec=infinity
ExecStart=/bin/sh {runner}
EOF
echo "stage2: exec systemd" > /dev/console
exec /lib/systemd/systemd --unit=poold-guest.service --show-status=yes
"""

# The unit's command. A service starts with systemd's environment, not stage 2's.
RUNNER = """export PATH={path} HOME=/root OUT={out} PYTHONPATH={checkout}
SHARE={share}
cd {cwd} && /bin/sh {script} > "$SHARE/stdout" 2> "$SHARE/stderr"
status=$?
journalctl -b --no-pager -o short-monotonic > "$SHARE/journal.log" 2>&1
echo $status > "$SHARE/returncode"
sync
echo "poold-guest: script finished, powering off" > /dev/console
systemctl poweroff --force --force
"""


CHECKOUT = Path(__file__).resolve().parents[2]


def _q(path: Path | str) -> str:
    return shlex.quote(str(path))


def run_guest(scenario: str | Scenario, guest_script: str, timeout_s: float = 240,
              workdir: Path | None = None, *, kernel: Kernel | None = None,
              cwd: Path | None = None) -> GuestResult:
    """Boot `scenario`, run `guest_script` with /bin/sh in the guest, power off, report.

    In the guest: cwd is `cwd` (default: the host's cwd; the checkout is at the same path), PATH
    starts with this interpreter's bin dir (the venv), and $OUT is a writable dir that comes back
    as GuestResult.out_dir. A non-zero script status is returned, not raised; GuestError means the
    guest never finished (timeout, panic).
    """
    spec = SCENARIOS[scenario] if isinstance(scenario, str) else scenario
    kernel = kernel or prepare_kernel()
    work = Path(workdir or tempfile.mkdtemp(prefix="poold-guest-")).resolve()
    for boot in range(1, BOOTS + 1):
        result = _boot_and_run(spec, guest_script, timeout_s, work, kernel, cwd)
        if result is not None:
            return result
        stalled = work / f"console.stalled-{boot}.log"  # kept, for whoever asks why
        (work / "console.log").replace(stalled)
        print(f"qemu: the kernel stalled before /init (console {stalled}); booting again",
              file=sys.stderr)
    raise GuestError(f"the kernel stalled before starting /init in each of {BOOTS} boots; "
                     f"console logs {work}/console.stalled-*.log")


def _boot_and_run(spec: Scenario, guest_script: str, timeout_s: float, work: Path,
                  kernel: Kernel, cwd: Path | None) -> GuestResult | None:
    """One boot of run_guest's; None when the kernel stalled before starting /init (nothing of
    the guest script, nor of poold, had run: the next boot starts from the same files)."""
    share, backing = work / "share", work / "backing"
    out = share / "out"
    for d in (share, backing):
        shutil.rmtree(d, ignore_errors=True)
    for d in (out, backing):
        d.mkdir(parents=True)
    (work / "script.sh").write_text(guest_script)
    path = ":".join([str(Path(sys.executable).parent), os.environ.get("PATH", "/usr/bin:/bin"),
                     "/usr/sbin", "/sbin"])
    # PYTHONPATH: the guest runs this checkout's poold, whichever tree the venv's editable
    # install points at (a copy of the checkout tested while the original is being edited).
    where = {"path": _q(path), "out": _q(out), "share": _q(share),
             "cwd": _q(cwd or Path.cwd()), "script": _q(work / "script.sh"),
             "checkout": _q(CHECKOUT)}
    if spec.systemd:
        (work / "runner.sh").write_text(RUNNER.format(**where))
        run = RUN_SYSTEMD.format(runner=work / "runner.sh")
    else:
        run = RUN_SH.format(**where)
    (work / "stage2.sh").write_text(STAGE2.format(
        **where, p9=P9_OPTS, kver=kernel.version, modules=_q(kernel.modules),
        modules_list=" ".join(spec.modules), run=run))
    console = work / "console.log"
    console.unlink(missing_ok=True)
    cmd = ["timeout", "-k", "10", str(int(timeout_s)), *_qemu_args(spec, kernel, work, console)]
    start = time.monotonic()
    with (work / "qemu.log").open("w+") as qemu_log:
        # Its own process group, so that a stalled boot's `timeout` and QEMU go together.
        proc = subprocess.Popen(cmd, stdout=qemu_log, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        stalled = _watch_boot(proc, console, timeout_s + 60)
        qemu_log.seek(0)
        qemu_err = qemu_log.read()
    wall = time.monotonic() - start
    if stalled:
        return None
    rc_file = share / "returncode"
    if not rc_file.exists():
        raise GuestError(_failure(proc.returncode, timeout_s, console, qemu_err, share))
    journal = share / "journal.log"
    return GuestResult(int(rc_file.read_text()), (share / "stdout").read_text(),
                       (share / "stderr").read_text(), console, out, backing, wall,
                       (share / "setup.log").read_text(),
                       journal.read_text(errors="replace") if journal.exists() else "")


# A kernel under TCG that has printed nothing for this long and not yet started /init is stuck
# (one hung at 1.5 s of guest time, in CI's rehearsal, for the whole 600 s time-out); a boot
# to /init takes about 10 s of guest time, and the kernel prints steadily until then.
BOOT_STALL_S = 120
BOOTS = 2  # boots a stalled kernel gets, the first included
_INIT_STARTED = "Run /init as init process"


def _watch_boot(proc: subprocess.Popen[str], console: Path, limit_s: float) -> bool:
    """Wait for QEMU to end; True when it was killed because the kernel stalled before /init."""
    deadline = time.monotonic() + limit_s
    size, changed = -1, time.monotonic()
    while proc.poll() is None:
        if time.monotonic() > deadline:
            _kill_group(proc)
            raise GuestError(f"QEMU did not end within {limit_s:.0f}s; console log {console}")
        now = time.monotonic()
        try:
            grown = console.stat().st_size
        except FileNotFoundError:
            grown = 0
        if grown != size:
            size, changed = grown, now
        elif now - changed > BOOT_STALL_S and _INIT_STARTED not in console.read_text(
                errors="replace"):
            _kill_group(proc)
            return True
        time.sleep(1)
    return False


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """End `timeout` and QEMU under it: a SIGKILL to `timeout` alone would leave QEMU running."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _qemu_args(spec: Scenario, kernel: Kernel, work: Path, console: Path) -> list[str]:
    # console=ttyS0 to the log file; panic=-1 + -no-reboot make a panic end QEMU at once.
    # no_timer_check: under software emulation on a loaded host, the kernel's early check that
    # the IO-APIC timer ticks can miss its window and panic ("IO-APIC + timer doesn't work");
    # the timer works, it is only slow to show it.
    append = (f"console=ttyS0 panic=-1 no_timer_check rdinit=/init "
              f"poold_stage2={work / 'stage2.sh'} {spec.cmdline}").strip()
    return [
        "qemu-system-x86_64", "-accel", "tcg", "-cpu", "max", "-smp", "2",  # no usable KVM here
        "-M", spec.machine, *spec.memory,
        "-nodefaults", "-display", "none", "-no-reboot", "-serial", f"file:{console}",
        "-kernel", str(kernel.vmlinuz), "-initrd", str(kernel.initramfs), "-append", append,
        # Explicit virtio-9p-pci on pcie.0: -virtfs would land on the last bus, a CXL one.
        "-fsdev", "local,id=fsroot,path=/,security_model=none,readonly=on,multidevs=remap",
        "-device", "virtio-9p-pci,fsdev=fsroot,mount_tag=hostroot,bus=pcie.0",
        "-fsdev", f"local,id=fsshare,path={work / 'share'},security_model=none",
        "-device", "virtio-9p-pci,fsdev=fsshare,mount_tag=hostshare,bus=pcie.0",
        *(arg.format(backing=work / "backing") for arg in spec.devices),
    ]


def _failure(status: int, timeout_s: float, console: Path, qemu_err: str, share: Path) -> str:
    text = console.read_text(errors="replace") if console.exists() else ""
    if status in (124, 137):
        why = f"timed out after {timeout_s:.0f}s"
    elif "Kernel panic" in text:
        why = "kernel panic"
    else:
        why = f"QEMU exited {status} before the script finished: {qemu_err.strip()[-2000:]}"
    tail = "\n".join(text.splitlines()[-30:])
    err = share / "stderr"
    err_tail = err.read_text(errors="replace")[-1500:] if err.exists() else ""
    return (f"guest {why}; console log {console}, last lines:\n{tail}"
            + (f"\nscript stderr so far:\n{err_tail}" if err_tail else ""))
