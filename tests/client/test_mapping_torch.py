"""Zero-copy torch CPU tensors over a mapping: the tensor's bytes are the device's bytes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from poold.client import Mapping
from poold.errors import ClientError
from poold.types import MiB


@pytest.fixture
def device(tmp_path: Path) -> str:
    path = tmp_path / "dev"
    path.write_bytes(b"\0" * 4 * MiB)
    return str(path)


def test_a_tensor_is_the_mapped_memory(device: str) -> None:
    with Mapping(device, 2 * MiB, 2 * MiB, 2 * MiB) as mapping:
        whole = mapping.tensor()
        assert whole.dtype == torch.uint8 and whole.shape == (2 * MiB,)
        whole[:4] = torch.tensor([1, 2, 3, 4], dtype=torch.uint8)  # writes reach the device
        assert mapping.buffer[:4] == b"\x01\x02\x03\x04"
        fd = os.open(device, os.O_RDWR)
        try:  # and writes through the device show in the tensor
            os.pwrite(fd, torch.arange(8, dtype=torch.float32).numpy().tobytes(), 3 * MiB)
        finally:
            os.close(fd)
        floats = mapping.tensor(torch.float32, offset=MiB, length=32)
        assert floats.tolist() == [float(i) for i in range(8)]
        assert floats.data_ptr() == whole.data_ptr() + MiB  # a view, not a copy
        assert mapping.tensor(offset=2 * MiB).numel() == 0
        del whole, floats
    assert Path(device).read_bytes()[2 * MiB:2 * MiB + 4] == b"\x01\x02\x03\x04"


def test_bad_ranges_and_closed_mappings_are_refused(device: str) -> None:
    mapping = Mapping(device, 0, 2 * MiB, 2 * MiB)
    for offset, length in ((-1, 8), (0, 2 * MiB + 1), (2 * MiB - 4, 8)):
        with pytest.raises(ValueError):
            mapping.tensor(offset=offset, length=length)
    with pytest.raises(ValueError):
        mapping.tensor(torch.float64, length=12)  # not a whole number of float64
    mapping.close()
    with pytest.raises(ClientError):
        mapping.tensor()


def test_a_tensor_outliving_close_keeps_the_pages(device: str) -> None:
    mapping = Mapping(device, 0, 2 * MiB, 2 * MiB)
    tensor = mapping.tensor()
    tensor[0] = 9
    mapping.close()  # does not raise, and does not pull the memory from under the tensor
    assert int(tensor[0]) == 9
    del tensor
