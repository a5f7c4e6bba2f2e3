"""Turning what callers pass (bytes, bytearrays, numpy arrays, lists of them) into byte views
of whole blocks, without copying. Owns the shape checks so the store's copy loops need none."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, cast

if TYPE_CHECKING:
    # Typing only: numpy is optional, and typing_extensions is pydantic's dependency, not ours.
    import numpy as np
    from typing_extensions import Buffer

    # numpy declares the buffer protocol to type checkers only from Python 3.12 on.
    BufferLike: TypeAlias = Buffer | np.ndarray[Any, Any]
    # One contiguous buffer of n blocks, or one buffer per block.
    Blocks: TypeAlias = BufferLike | Sequence[BufferLike]


def _bytes_view(obj: BufferLike) -> memoryview:
    view = memoryview(cast("Buffer", obj))  # ndarrays are buffers at run time on 3.11 too
    if not view.c_contiguous:
        raise ValueError("blocks must be C-contiguous")
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


def split_blocks(blocks: Blocks, count: int, block_size: int) -> list[memoryview]:
    """One `block_size`-byte view per block."""
    try:
        whole: memoryview | None = _bytes_view(blocks)  # type: ignore[arg-type]
    except TypeError:  # no buffer protocol: a sequence of blocks
        whole = None
    if whole is not None:
        if whole.nbytes != count * block_size:
            raise ValueError(f"{whole.nbytes} bytes is not {count} blocks of {block_size}")
        return [whole[i * block_size:(i + 1) * block_size] for i in range(count)]
    assert isinstance(blocks, Sequence)
    if len(blocks) != count:
        raise ValueError(f"{len(blocks)} blocks for {count} keys")
    views = [_bytes_view(b) for b in blocks]
    for view in views:
        if view.nbytes != block_size:
            raise ValueError(f"a block is {view.nbytes} bytes, not {block_size}")
    return views


def output_view(out: BufferLike, count: int, block_size: int) -> memoryview:
    """A writable byte view of at least `count` blocks."""
    view = _bytes_view(out)
    if view.readonly:
        raise ValueError("the output buffer is read-only")
    if view.nbytes < count * block_size:
        raise ValueError(f"the output buffer holds {view.nbytes} bytes, "
                         f"{count * block_size} needed")
    return view
