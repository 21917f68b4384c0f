"""``gpumine.kernels.stride_grid`` (no GPU: the driver's occupancy is mocked)."""

from __future__ import annotations


def test_stride_grid_is_at_most_one_wave_of_resident_blocks(monkeypatch):
    import gpumine.kernels as kernels

    asked = []

    def resident_blocks(kernel, block, shared_mem=0):
        asked.append((kernel, block, shared_mem))
        return 792  # six blocks of 256 threads on each of 132 multiprocessors

    monkeypatch.setattr(kernels, "resident_blocks", resident_blocks)
    assert kernels.stride_grid("filter", 256, 10_000_000) == 792  # not 1056: no partial wave
    assert kernels.stride_grid("filter", 256, 1000) == 4  # the blocks the items need
    assert kernels.stride_grid("filter", 256, 0) == 1
    assert kernels.stride_grid("scan", 256, 10_000_000, 4096) == 792
    assert asked[-1] == ("scan", 256, 4096)  # the shared memory reaches the occupancy
