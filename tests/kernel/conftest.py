"""The real-kernel tier: every test here boots Debian's 6.1 kernel under QEMU (see qemu.py).

The session fixture installs the host tools and prepares the kernel once (cached across runs, see
POOLD_QEMU_CACHE). Tests skip only where the host cannot run guests at all (not root, no apt);
POOLD_TEST_REQUIRE_KERNEL=1 (CI) turns that skip into a failure so the tier cannot vanish silently.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kernel import qemu
from tests.preconditions import unmet

HERE = Path(__file__).parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kernel: boots a real kernel under QEMU (tests/kernel)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # This hook sees the whole session's items: mark only the ones in this folder.
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.kernel)


@pytest.fixture(scope="session")
def guest_kernel() -> qemu.Kernel:
    try:
        qemu.ensure_tools()
    except qemu.HarnessUnavailable as exc:
        unmet("kernel", str(exc))
    return qemu.prepare_kernel()
