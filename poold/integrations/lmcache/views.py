"""Byte views of LMCache's memory objects, for the copies in and out of poold."""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

from lmcache.v1.memory_management import TensorMemoryObj

if TYPE_CHECKING:
    from lmcache.v1.memory_management import MemoryObj

# A view of a tensor memory object's bytes made from its address and size, which is what its
# `byte_array` is too, for a third of the cost (byte_array casts a pointer and builds a ctypes
# array each call): chunk-by-chunk puts and gets pay it per chunk. Valid while the object is.
_FROM_MEMORY = ctypes.pythonapi.PyMemoryView_FromMemory
_FROM_MEMORY.restype = ctypes.py_object
_FROM_MEMORY.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int)
_PYBUF_WRITE = 0x200


def bytes_of(obj: MemoryObj) -> memoryview:
    """obj.byte_array: its get_size() bytes from its data_ptr."""
    if type(obj) is TensorMemoryObj:
        view: memoryview = _FROM_MEMORY(obj.data_ptr, obj.get_size(), _PYBUF_WRITE)
        return view
    whole: memoryview = obj.byte_array
    return whole
