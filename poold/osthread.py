"""The daemon's threads named in the kernel, not only in Python.

CPython (before 3.14) leaves every thread's kernel name as the executable's ("python"), so
`top -H`, `ps -L`, perf and /proc/<pid>/task/*/comm cannot tell the ledger writer from the HTTP
thread. Each long-lived daemon thread calls `name_this_thread` first; its Python name then shows
there too (the kernel keeps 15 bytes).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import threading

_PR_SET_NAME = 15  # linux/prctl.h
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True) if sys.platform == "linux" \
    else None


def name_this_thread() -> None:
    """Give the calling thread its Python name in the kernel (Linux; elsewhere nothing)."""
    if _libc is None:
        return
    name = threading.current_thread().name.encode("ascii", "replace")[:15]
    _libc.prctl(_PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0)  # a failure leaves "python": fine
