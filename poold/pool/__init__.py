"""The pure allocator: aligned extents in an address space. No I/O, no database, no clock."""

from poold.pool.allocator import AllocatorError, ExtentAllocator

__all__ = ["AllocatorError", "ExtentAllocator"]
