"""Mapping: the leased extent of a device in this process's address space.

MAP_SHARED at exactly the lease's offset and length, pre-faulted so the first copy runs at memory
speed instead of taking a page fault per page. Alignment is checked here: the kernel has been seen
to accept a misaligned devdax offset once, and a wrong offset would touch someone else's bytes.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from typing import TYPE_CHECKING, Any

from poold.errors import ClientError, MisalignedExtent

if TYPE_CHECKING:
    import numpy as np
    import torch

MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)  # Linux 5.14+


class Mapping:
    def __init__(self, chardev: str, offset: int, length: int, align: int, *,
                 prefault: bool = True, fd: int | None = None) -> None:
        """Map [offset, offset+length) of `chardev`, opening it, or of `fd` when given (a
        descriptor the daemon passed over its UNIX socket; the mapping does not close it)."""
        if length <= 0 or align <= 0 or offset % align or length % align:
            raise MisalignedExtent(
                f"extent [{offset}, +{length}) of {chardev} is not aligned to {align}")
        if offset % mmap.ALLOCATIONGRANULARITY:
            raise MisalignedExtent(f"offset {offset} is not page aligned")
        self.chardev, self.offset, self.length = chardev, offset, length
        self.via = "fd" if fd is not None else "open"
        owned = fd is None
        if fd is None:
            try:
                fd = os.open(chardev, os.O_RDWR | os.O_CLOEXEC)
            except OSError as exc:
                raise ClientError(f"cannot open {chardev}: {exc.strerror}") from exc
        try:
            self._mmap: mmap.mmap | None = self._map(fd, prefault)
        except OSError as exc:
            raise ClientError(f"cannot map {chardev} at {offset}+{length}: {exc.strerror}"
                              ) from exc
        finally:
            if owned:
                os.close(fd)
        self._view: memoryview | None = memoryview(self._mmap)

    def _map(self, fd: int, prefault: bool) -> mmap.mmap:
        """Pre-fault for write with MADV_POPULATE_WRITE (Linux 5.14+): page tables present and
        dirty, so the first copy runs at memory speed. MAP_POPULATE instead leaves them clean
        (each first write then pays a fault), so it is only the fallback for older kernels."""
        prot = mmap.PROT_READ | mmap.PROT_WRITE
        mapped = mmap.mmap(fd, self.length, flags=mmap.MAP_SHARED, prot=prot, offset=self.offset)
        if not prefault:
            return mapped
        try:
            mapped.madvise(MADV_POPULATE_WRITE)
            return mapped
        except OSError:
            mapped.close()
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        return mmap.mmap(fd, self.length, flags=flags, prot=prot, offset=self.offset)

    @property
    def buffer(self) -> memoryview:
        if self._view is None:
            raise ClientError("mapping is closed")
        return self._view

    def numpy(self) -> np.ndarray[Any, np.dtype[np.uint8]]:
        """A zero-copy uint8 array over the mapping (needs numpy)."""
        import numpy as np

        return np.frombuffer(self.buffer, dtype=np.uint8)

    def tensor(self, dtype: torch.dtype | None = None, *, offset: int = 0,
               length: int | None = None) -> torch.Tensor:
        """A zero-copy, 1-D torch CPU tensor over [offset, offset+length) of the mapping (the
        whole of it by default), of `dtype` (uint8 by default); needs torch. Writes through it
        are writes to the leased memory. Like numpy views, it keeps the pages mapped after
        close() until it is gone."""
        import torch

        view = self.buffer  # ClientError once closed
        dtype = torch.uint8 if dtype is None else dtype
        length = self.length - offset if length is None else length
        itemsize = dtype.itemsize
        if not 0 <= offset <= offset + length <= self.length or length % itemsize:
            raise ValueError(f"[{offset}, +{length}) is not a whole number of {dtype} inside "
                             f"the mapping's {self.length} bytes")
        if length == 0:
            return torch.empty(0, dtype=dtype)
        # torch.frombuffer keeps a reference to the object it is given but no buffer export,
        # so a tensor straight over the mmap would let close() unmap under it (a crash on the
        # next access). A slice of our view holds an export for as long as the tensor holds
        # the slice, so close() leaves the pages mapped until the last tensor is gone.
        return torch.frombuffer(view[offset:offset + length], dtype=dtype)

    def close(self) -> None:
        """Unmap. Views still exported (numpy arrays, tensors) keep it mapped until they are
        gone."""
        if self._view is not None:
            self._view.release()
            self._view = None
        if self._mmap is not None:
            with contextlib.suppress(BufferError):
                self._mmap.close()
            self._mmap = None

    def __enter__(self) -> Mapping:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
