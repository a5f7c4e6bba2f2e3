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


def bytes_view(obj: BufferLike) -> memoryview:
    """A flat byte view of a C-contiguous buffer (any format, any shape), without copying."""
    view = memoryview(cast("Buffer", obj))  # ndarrays are buffers at run time on 3.11 too
    if not view.c_contiguous:
        raise ValueError("blocks must be C-contiguous")
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


class BlockSource:
    """The blocks of one put: one contiguous buffer (`whole`) or one view per block (`parts`).
    From a contiguous buffer, neighbouring blocks can be copied in one go (`span`)."""

    __slots__ = ("count", "parts", "size", "whole")

    def __init__(self, whole: memoryview | None, parts: list[memoryview] | None,
                 count: int, size: int) -> None:
        self.whole, self.parts, self.count, self.size = whole, parts, count, size

    def span(self, first: int, count: int) -> memoryview:
        """Blocks first .. first+count-1 as one view (count > 1 only from a whole buffer)."""
        if self.whole is not None:
            return self.whole[first * self.size:(first + count) * self.size]
        assert self.parts is not None and count == 1
        return self.parts[first]


def block_view(block: BufferLike, block_size: int) -> memoryview:
    """One whole block as a byte view, without copying."""
    view = bytes_view(block)
    if view.nbytes != block_size:
        raise ValueError(f"a block is {view.nbytes} bytes, not {block_size}")
    return view


def split_blocks(blocks: Blocks | BlockSource, count: int, block_size: int) -> BlockSource:
    """The `count` blocks of `block_size` bytes in what a caller passed, without copying."""
    if isinstance(blocks, BlockSource):
        if (blocks.count, blocks.size) != (count, block_size):
            raise ValueError(f"{blocks.count} blocks of {blocks.size} for {count} of "
                             f"{block_size}")
        return blocks
    try:
        whole: memoryview | None = bytes_view(blocks)  # type: ignore[arg-type]
    except TypeError:  # no buffer protocol: a sequence of blocks
        whole = None
    if whole is not None:
        if whole.nbytes != count * block_size:
            raise ValueError(f"{whole.nbytes} bytes is not {count} blocks of {block_size}")
        return BlockSource(whole, None, count, block_size)
    assert isinstance(blocks, Sequence)
    if len(blocks) != count:
        raise ValueError(f"{len(blocks)} blocks for {count} keys")
    return BlockSource(None, [block_view(b, block_size) for b in blocks], count, block_size)


def output_view(out: BufferLike, count: int, block_size: int) -> memoryview:
    """A writable byte view of at least `count` blocks."""
    view = bytes_view(out)
    if view.readonly:
        raise ValueError("the output buffer is read-only")
    if view.nbytes < count * block_size:
        raise ValueError(f"the output buffer holds {view.nbytes} bytes, "
                         f"{count * block_size} needed")
    return view
