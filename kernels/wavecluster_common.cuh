// Device helpers shared by the WaveCluster kernels (wavecluster.cu, wavecluster_tree.cu):
// grid coordinates, the atomic union-find, warp-aggregated additions.
#pragma once
#include "common.cuh"

#define WC_MAX_DIMS 8

// Coordinates c (WC_MAX_DIMS, 1s in front) of a flat index in a row-major grid of `extent`.
__device__ __forceinline__ void unflatten(index_t flat, const index_t* extent, index_t* c) {
    for (int a = WC_MAX_DIMS - 1; a >= 0; --a) {
        if (extent[a] == 1) {  // a padding axis: no 64-bit division
            c[a] = 0;
            continue;
        }
        c[a] = flat % extent[a];
        flat /= extent[a];
    }
}

// Union-find on the GPU (label equivalence with atomic hooking): every foreground cell
// starts as its own root; for each neighbour (half of the offsets) the two roots are
// united by a compare-and-swap that hooks the larger root under the smaller, retried
// until it sticks; a final pass points every cell at its root (the smallest flat index of
// its component). The union's finds split the path as they walk it (each cell passed is
// pointed at its grandparent): a non-root's parent only ever moves to one of its
// ancestors, and a cell that is not a root never becomes one, so the writes are safe beside
// the hooking CAS, which only succeeds on a root. The final pass must not split: a split
// writes an ancestor read earlier, which could replace the root another thread has just
// stored for that cell.
template <bool SPLIT, typename I>
__device__ __forceinline__ I uf_find(I* parent, I x) {
    volatile I* p_ = parent;  // other threads hook roots and split paths concurrently
    I p = p_[x];
    while (p != x) {
        const I g = p_[p];
        if (SPLIT && g != p) p_[x] = g;
        x = p;
        p = g;
    }
    return x;
}

__device__ __forceinline__ int uf_cas(int* at, int expected, int desired) {
    return atomicCAS(at, expected, desired);
}

__device__ __forceinline__ index_t uf_cas(index_t* at, index_t expected, index_t desired) {
    return (index_t)atomicCAS((unsigned long long*)at, (unsigned long long)expected,
                              (unsigned long long)desired);
}

// Unite the components of cells a and b (parents in global or shared memory): hook the
// larger root under the smaller by a compare-and-swap on the root, retried until it sticks
// (or the roots are one).
template <typename I>
__device__ __forceinline__ void uf_unite(I* parent, I a, I b) {
    while (true) {
        I x = uf_find<true>(parent, a), y = uf_find<true>(parent, b);
        if (x == y) return;
        if (x < y) { const I tmp = x; x = y; y = tmp; }
        if (uf_cas(&parent[x], x, y) == x) return;
    }
}

// uf_unite from a root held across calls: unite the component of `root` (a cell whose root
// chain the caller keeps) with that of cell b, and return the smaller of the two roots,
// from which the next call starts (a thread uniting one cell with each of its neighbours
// walks that cell's chain once, not once a neighbour). A stale root -- hooked by another
// thread since -- is still an ancestor, so the finds start from it safely.
template <typename I>
__device__ __forceinline__ I uf_unite_root(I* parent, I root, I b) {
    while (true) {
        I x = uf_find<true>(parent, root), y = uf_find<true>(parent, b);
        if (x == y) return x;
        if (x < y) { const I tmp = x; x = y; y = tmp; }
        if (uf_cas(&parent[x], x, y) == x) return y;
    }
}

// out[bin] += value for every lane of a warp (all 32 lanes call it; bin 0 is not counted):
// the lanes of one bin found by __match_any_sync and their values summed by shuffles, so a
// warp makes one atomic per distinct bin (a few bins take most cells) instead of one a lane.
__device__ __forceinline__ void warp_add(double* out, index_t bin, double value) {
    const unsigned peers = __match_any_sync(0xffffffffu, (unsigned long long)bin);
    double sum = 0.0;
    for (unsigned rest = peers; rest; rest &= rest - 1)
        sum += __shfl_sync(peers, value, __ffs(rest) - 1);
    if (bin != 0 && (int)(threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&out[bin], sum);
}
