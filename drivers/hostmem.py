"""This host's memory figures (psutil), for the hosts view."""

from __future__ import annotations

from dataclasses import dataclass

import psutil


@dataclass(frozen=True, slots=True)
class HostMemory:
    total: int
    available: int
    used: int
    swap_total: int
    swap_used: int


def host_memory() -> HostMemory:
    vm = psutil.virtual_memory()
    swap = psutil.swap_memory()
    return HostMemory(total=vm.total, available=vm.available, used=vm.used,
                      swap_total=swap.total, swap_used=swap.used)
