"""The second process of the sharing test: maps a lease the first process filled and reads it.

Read-only (O_RDONLY, PROT_READ): a consumer of published blocks needs no write access. Kept apart
from the test module so the spawned child imports nothing but the standard library.
"""

from __future__ import annotations

import mmap
import os
from multiprocessing.connection import Connection


def read_published_blocks(conn: Connection) -> None:
    """Receive [(map_path, map_offset, lease_length, align, [slot_offset...])] and a block
    size; send back each block's bytes, read through this process's own mapping."""
    extents, block_size = conn.recv()
    found: list[bytes] = []
    for path, offset, length, _align, slots in extents:
        fd = os.open(path, os.O_RDONLY)
        try:
            with mmap.mmap(fd, length, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ,
                           offset=offset) as mapping:
                found.extend(mapping[s:s + block_size] for s in slots)
        finally:
            os.close(fd)
    conn.send(found)
    conn.close()
