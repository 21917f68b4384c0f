// WaveCluster's component tree of a grid's density levels
// (gpumine.wavecluster.gpu_tree.levels_tree): every level's connected components from one
// union-find over the cells, the levels' bands joined from the top level down, as the CPU's
// compiled levels_tree does it one cell at a time. Level j's foreground is density >=
// thresholds[j] (ascending); a cell's band is the last level it reaches (-1: none). Band j's
// cells join their neighbours of band j and above (tree_bands, a grid barrier a band), so
// that after it the sets are level j's components, each rooted at its smallest flat index.
// A root hooked during band j (under a smaller root) records j in `hooked`: a cell r is then
// the root (the first cell) of a component of level j exactly where hooked[r] < j <=
// level[r] -- the tree's nodes are these (cell, level) pairs, numbered by one prefix sum. What
// a node's parent and a cell's own node need from the union-find at the end of a band (the
// set a cell or a hooked root lies in) is kept then, in the same launch.
#include <cooperative_groups.h>
#include "common.cuh"
#include "wavecluster_common.cuh"

namespace cg = cooperative_groups;

// uf_unite_root that records the band in which a root is hooked (each root is hooked once:
// a cell that is not a root never becomes one again).
__device__ __forceinline__ index_t tree_unite(index_t* parent, int* hooked, index_t root,
                                              index_t b, int band) {
    while (true) {
        index_t x = uf_find<true>(parent, root), y = uf_find<true>(parent, b);
        if (x == y) return x;
        if (x < y) { const index_t tmp = x; x = y; y = tmp; }
        if (uf_cas(&parent[x], x, y) == x) {
            hooked[x] = band;
            return y;
        }
    }
}

// The whole union-find in one cooperative launch, grid-stride over the cells: each cell's
// band (its own parent, not hooked); then for each band from the top down, its cells join
// their neighbours of the band and above -- the whole neighbourhood (both signs of every
// offset; uf_union's flat steps and axis masks), a pair within the band once, from its lower
// cell (the positive step) -- and, after a grid barrier, the set each of its cells lies in
// (own_root) and the set each root hooked in it went into (hook_root) are kept (no hooking
// runs then: the finds split paths freely); last, 1 where a cell roots a component at some
// level (hooked < level). R: int, or long long past 2^31 cells.
template <typename R>
__global__ void tree_bands(const double* __restrict__ values,      // IN  (cells) densities
                           const double* __restrict__ thresholds,  // IN  (m) ascending
                           int m,                                  // IN
                           const index_t* __restrict__ shape,      // IN  (8)
                           const index_t* __restrict__ step,       // IN  (n_offsets) flat steps
                           const int* __restrict__ down,           // IN  (n_offsets) axes stepped down
                           const int* __restrict__ up,             // IN  (n_offsets) axes stepped up
                           int n_offsets, index_t cells,           // IN
                           int* __restrict__ level,                // OUT (cells) -1..m-1
                           index_t* parent,                        // OUT (cells) scratch
                           int* hooked,                            // OUT (cells) -1..m-1
                           index_t* __restrict__ own_root,         // OUT (cells) where level >= 0
                           index_t* __restrict__ hook_root,        // OUT (cells) where hooked >= 0
                           R* __restrict__ is_root)                // OUT (cells)
{
    cg::grid_group grid = cg::this_grid();
    const index_t first_cell = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    const index_t stride = (index_t)gridDim.x * blockDim.x;
    for (index_t t = first_cell; t < cells; t += stride) {
        const double v = values[t];
        int j = -1;
        while (j + 1 < m && v >= thresholds[j + 1]) ++j;
        level[t] = j;
        parent[t] = t;
        hooked[t] = -1;
    }
    grid.sync();
    for (int band = m - 1; band >= 0; --band) {
        for (index_t t = first_cell; t < cells; t += stride) {
            if (level[t] != band) continue;
            index_t c[WC_MAX_DIMS];
            unflatten(t, shape, c);
            int low = 0, high = 0;  // the axes at which the cell is at index 0, at the last
#pragma unroll
            for (int a = 0; a < WC_MAX_DIMS; ++a) {
                low |= (c[a] == 0) << a;
                high |= (c[a] == shape[a] - 1) << a;
            }
            index_t root = t;
            for (int o = 0; o < n_offsets; ++o) {
                if ((down[o] & low) | (up[o] & high)) continue;
                const index_t s = step[o], f = t + s;
                const int other = ((volatile int*)level)[f];
                if (other > band || (other == band && s > 0))
                    root = tree_unite(parent, hooked, root, f, band);
            }
        }
        grid.sync();
        for (index_t t = first_cell; t < cells; t += stride) {
            const bool own = level[t] == band, hook = ((volatile int*)hooked)[t] == band;
            if (!own && !hook) continue;
            const index_t r = uf_find<true>(parent, t);
            if (own) own_root[t] = r;
            if (hook) hook_root[t] = r;
        }
        grid.sync();
    }
    for (index_t t = first_cell; t < cells; t += stride)
        is_root[t] = level[t] > ((volatile int*)hooked)[t] ? R(1) : R(0);
}

// Each root's column of the (m, roots) table of flags, the top level's row first: 1 at the
// levels where it roots a component (hooked < j <= level). One prefix sum over the whole
// table then gives every node its index + 1 (the top level's nodes first, each level's in
// raster order of their first cells): node(j, row) = node_index[(m - 1 - j) * roots + row] - 1.
template <typename R>
__global__ void tree_rows(const int* __restrict__ level,   // IN  (cells)
                          const int* __restrict__ hooked,  // IN  (cells)
                          const R* __restrict__ rank,      // IN  (cells) inclusive prefix of roots
                          index_t cells, int m, index_t roots,  // IN
                          int* __restrict__ flags)         // OUT (m, roots)
{
    for (index_t t = (index_t)blockIdx.x * blockDim.x + threadIdx.x; t < cells;
         t += (index_t)gridDim.x * blockDim.x) {
        const int top = level[t], below = hooked[t];
        if (top <= below) continue;
        const index_t row = (index_t)rank[t] - 1;
        for (int j = 0; j < m; ++j)
            flags[(index_t)(m - 1 - j) * roots + row] = (below < j && j <= top);
    }
}

// Each node's level and its parent node at level j - 1: its root's own node there where
// the root is still a root, else the node of the set it was hooked into (hook_root); -1 at
// level 0. node_index: tree_rows' table, prefix-summed.
template <typename R>
__global__ void tree_nodes(const int* __restrict__ level,          // IN  (cells)
                           const int* __restrict__ hooked,         // IN  (cells)
                           const index_t* __restrict__ hook_root,  // IN  (cells) where hooked >= 0
                           const R* __restrict__ rank,             // IN  (cells)
                           const int* __restrict__ node_index,     // IN  (m, roots)
                           index_t cells, int m, index_t roots,    // IN
                           int* __restrict__ node_level,           // OUT (nodes)
                           index_t* __restrict__ node_parent)      // OUT (nodes)
{
    for (index_t t = (index_t)blockIdx.x * blockDim.x + threadIdx.x; t < cells;
         t += (index_t)gridDim.x * blockDim.x) {
        const int top = level[t], below = hooked[t];
        if (top <= below) continue;
        const index_t row = (index_t)rank[t] - 1;
        const index_t into_row = below >= 0 ? (index_t)rank[hook_root[t]] - 1 : row;
        for (int j = below + 1; j <= top; ++j) {
            const index_t k = node_index[(index_t)(m - 1 - j) * roots + row] - 1;
            node_level[k] = j;
            index_t up = -1;
            if (j > 0) {
                const index_t r = j - 1 > below ? row : into_row;
                up = node_index[(index_t)(m - j) * roots + r] - 1;
            }
            node_parent[k] = up;
        }
    }
}

// Each cell's own node (its component at its own level; -1 below every level), and the
// cells' densities added to their nodes: direct[k + 1] (warp_add; slot 0 takes nothing).
// Whole warps step together.
template <typename R>
__global__ void tree_cells(const int* __restrict__ level,         // IN  (cells)
                           const index_t* __restrict__ own_root,  // IN  (cells) where level >= 0
                           const R* __restrict__ rank,            // IN  (cells)
                           const int* __restrict__ node_index,    // IN  (m, roots)
                           const double* __restrict__ values,     // IN  (cells)
                           index_t cells, int m, index_t roots,   // IN
                           index_t* __restrict__ cell_node,       // OUT (cells)
                           double* __restrict__ direct)           // INOUT (nodes + 1) zeroed
{
    for (index_t base = (index_t)blockIdx.x * blockDim.x; base < cells;
         base += (index_t)gridDim.x * blockDim.x) {
        const index_t t = base + threadIdx.x;
        index_t k = -1;
        if (t < cells) {
            const int j = level[t];
            if (j >= 0) {
                const index_t row = (index_t)rank[own_root[t]] - 1;
                k = node_index[(index_t)(m - 1 - j) * roots + row] - 1;
            }
            cell_node[t] = k;
        }
        warp_add(direct, k + 1, k >= 0 ? values[t] : 0.0);
    }
}

// Each node's mass (its cells' and every descendant's) and parent, packed for one transfer:
// packed[1 + k] the mass (direct masses added up the parent links: at most m of them),
// packed[1 + nodes + k] the parent node as a double (exact below 2^53). Whole warps step.
__global__ void tree_mass(const index_t* __restrict__ node_parent,  // IN  (nodes)
                          const double* __restrict__ direct,        // IN  (nodes + 1)
                          index_t nodes, int m,                     // IN
                          double* __restrict__ packed)              // INOUT (1 + 2 nodes), zeroed
{
    for (index_t base = (index_t)blockIdx.x * blockDim.x; base < nodes;
         base += (index_t)gridDim.x * blockDim.x) {
        const index_t k = base + threadIdx.x;
        index_t at = k < nodes ? k : -1;
        const double mass = at >= 0 ? direct[k + 1] : 0.0;
        if (at >= 0) packed[1 + nodes + k] = (double)node_parent[k];
        for (int s = 0; s < m; ++s) {  // a node lies at most m - 1 levels above level 0
            warp_add(packed, at + 1, at >= 0 ? mass : 0.0);
            if (at >= 0) at = node_parent[at];
        }
    }
}

// Level j's labelling off the tree: each cell's number at level j (its own node, or the
// ancestor of it at level j: at most m parent links), 0 below level j.
__global__ void tree_labels(const index_t* __restrict__ cell_node,    // IN  (cells)
                            const int* __restrict__ node_level,       // IN  (nodes)
                            const index_t* __restrict__ node_parent,  // IN  (nodes)
                            int j, index_t begin, index_t cells,      // IN
                            index_t* __restrict__ out)                // OUT (cells)
{
    for (index_t t = (index_t)blockIdx.x * blockDim.x + threadIdx.x; t < cells;
         t += (index_t)gridDim.x * blockDim.x) {
        index_t k = cell_node[t];
        if (k < 0 || node_level[k] < j) {
            out[t] = 0;
            continue;
        }
        while (node_level[k] > j) k = node_parent[k];
        out[t] = k - begin + 1;
    }
}

// Each cell's value from its own node or, where that holds 0, the nearest of its ancestors
// that holds one (0 if none): cpu_fast's node_paint.
__global__ void tree_paint(const index_t* __restrict__ cell_node,    // IN  (cells)
                           const index_t* __restrict__ node_parent,  // IN  (nodes)
                           const index_t* __restrict__ value,        // IN  (nodes)
                           index_t cells,                            // IN
                           index_t* __restrict__ out)                // OUT (cells)
{
    for (index_t t = (index_t)blockIdx.x * blockDim.x + threadIdx.x; t < cells;
         t += (index_t)gridDim.x * blockDim.x) {
        index_t k = cell_node[t], v = 0;
        while (k >= 0) {
            v = value[k];
            if (v != 0) break;
            k = node_parent[k];
        }
        out[t] = v;
    }
}
