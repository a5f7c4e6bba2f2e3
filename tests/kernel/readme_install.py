"""The README's "Install as a service" commands, read from README.md itself and carried out: the
program's installation on the host, everything else in a guest that boots systemd.

Owns: parsing the section's first `sh` block into commands (`sudo` and comments dropped);
running the host's part (apt-get, `python3 -m venv /opt/poold`, `/opt/poold/bin/pip install .`)
in a copy of this checkout, in a private mount namespace where /opt is an overlay whose upper
layer is the test's, so the venv is made at /opt/poold, as written, and every path in it says so,
while the host's own /opt stays as it was; and writing the guest's part as a shell script that
runs each remaining command, in order, keeping its output and exit status. Leaves alone: booting
the guest and judging what the commands did (test_service.py).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.kernel import qemu

SECTION = "## Install as a service"
PREFIX = Path("/opt/poold")
# sudo's secure_path on Debian: what `sudo python3`, `sudo poold` find (not this venv, not pyenv).
SECURE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Command:
    index: int  # its place among the block's commands
    words: tuple[str, ...]  # as written, less `sudo`

    @property
    def line(self) -> str:
        return shlex.join(self.words)

    @property
    def on_host(self) -> bool:
        """Installing the program happens on the host, into the /opt/poold the guest will see;
        the guest boots without network and would take minutes over pip under emulation."""
        program = self.words[0]
        return program in ("apt-get", "python3") or program == f"{PREFIX}/bin/pip"


def commands(readme: Path) -> list[Command]:
    """Every command of the section's first sh block, one per line."""
    section = readme.read_text().split(f"\n{SECTION}\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    found: list[Command] = []
    for line in block.splitlines():
        words = shlex.split(line, comments=True)  # '#' inside quotes (the sed) is kept
        if words[:1] == ["sudo"]:
            words = words[1:]
        if words:
            found.append(Command(len(found), tuple(words)))
    return found


def copy_checkout(root: Path, dest: Path) -> Path:
    """The working tree as git sees it (tracked and untracked, not ignored): a fresh checkout
    with this one's changes, and no build/ left over from other installs for pip to reuse."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=root, capture_output=True, check=True)
    for name in sorted(set(listed.stdout.decode().split("\0")) - {""}):
        source = root / name
        if source.is_file():  # a tracked file deleted in the working tree is left out
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return dest


def install_on_host(steps: list[Command], checkout: Path, work: Path) -> tuple[Path, str]:
    """Run the host's commands in `checkout`; return where /opt/poold's contents are on the
    host (the overlay's upper layer) and what the commands printed."""
    if PREFIX.exists():
        raise RuntimeError(f"{PREFIX} exists on this host: the test installs its own there in "
                           "a private view of /opt, which must not merge with another")
    upper, scratch = work / "opt-upper", work / "opt-work"
    upper.mkdir(parents=True)
    scratch.mkdir()
    lines = ["set -ex",
             f"mount -t overlay overlay -o lowerdir=/opt,upperdir={upper},workdir={scratch} /opt"]
    for step in steps:
        if step.words[:2] == ("apt-get", "install"):
            wanted = tuple(w for w in step.words[2:] if not w.startswith("-"))
            if not qemu.missing_packages(wanted):
                lines.append(f": already installed: {step.line}")  # no apt lock for nothing
                continue
        lines.append(step.line)
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env.update(PATH=SECURE_PATH, DEBIAN_FRONTEND="noninteractive")
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           "\n".join(lines)], cwd=checkout, env=env, capture_output=True,
                          text=True, timeout=900)
    output = done.stdout + done.stderr
    if done.returncode != 0:
        raise RuntimeError(f"the README's host steps failed ({done.returncode}):\n"
                           f"{output[-4000:]}")
    return upper / PREFIX.name, output


def guest_script(steps: list[Command], prefix_on_host: Path) -> str:
    """Make /opt/poold the host's install, then run each guest command from the checkout with
    sudo's PATH, keeping `$OUT/readme-<index>.out` and `.rc`. `journalctl -f` would follow for
    ever: it runs without -f."""
    lines = [
        f"export PATH={SECURE_PATH}",
        f"mkdir -p {PREFIX} && mount --bind {shlex.quote(str(prefix_on_host))} {PREFIX}",
        'readme_step() { sh -c "$2" > "$OUT/readme-$1.out" 2>&1; echo $? > "$OUT/readme-$1.rc"; }',
    ]
    for step in steps:
        words = step.words
        if words[0] == "journalctl":
            words = tuple(w for w in words if w != "-f")
        lines.append(f"readme_step {step.index} {shlex.quote(shlex.join(words))}")
    return "\n".join(lines) + "\n"
