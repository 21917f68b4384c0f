// WaveCluster kernels (seed paper 003). Grids are row-major with up to 8 axes (the sliding
// window: 4); shapes are passed as device arrays of 8 extents padded with 1s at the front.
// X is column-major: XT[j * n + i].
#include "common.cuh"

#define WC_MAX_DIMS 8


// Fused min/max: one pass over X computes every feature's bounds. Each block reduces its
// points (block_all_reduce) and writes one (min, max) pair per feature; the host reduces the
// few per-block partials. partial: (blocks, 2, d). Launched with GPUMINE_BLOCK threads.
__global__ void __launch_bounds__(GPUMINE_BLOCK)
minmax_columns(const double* __restrict__ XT,  // IN  (d, n)
               index_t n, int d,               // IN
               double* __restrict__ partial)   // OUT (blocks, 2, d)
{
    __shared__ double s_min[GPUMINE_BLOCK / kWarpSize], s_max[GPUMINE_BLOCK / kWarpSize];
    for (int j = 0; j < d; ++j) {
        double lo = 1.7976931348623157e+308, hi = -1.7976931348623157e+308;
        for (index_t i = (index_t)blockIdx.x * GPUMINE_BLOCK + threadIdx.x; i < n;
             i += (index_t)gridDim.x * GPUMINE_BLOCK) {
            const double x = XT[(index_t)j * n + i];
            lo = fmin(lo, x);
            hi = fmax(hi, x);
        }
        lo = block_all_reduce<GPUMINE_BLOCK>(lo, s_min, FMin());
        hi = block_all_reduce<GPUMINE_BLOCK>(hi, s_max, FMax());
        if (threadIdx.x == 0) {
            partial[((index_t)blockIdx.x * 2) * d + j] = lo;
            partial[((index_t)blockIdx.x * 2 + 1) * d + j] = hi;
        }
    }
}

// Quantize and histogram: cell = clip(floor((x - lo) / span * m), 0, m - 1) per feature,
// exactly the CPU's arithmetic (no contraction: explicit round-to-nearest intrinsics).
// Points outside [lo, hi] get cell -1 and add nothing. With SHARED the block accumulates
// into a shared-memory copy of the histogram (it fits) and flushes it once. The weight of
// the points inside goes to *total as well (a block sum, one atomic a block): the grid's
// sum, which the "auto" threshold counts points in, without a pass over the grid (total null:
// not wanted). Like the bins, it is exact for unit weights and rounds in atomic order for
// others.
// Block-private bins in shared memory (privatized atomics): zeroed before the block adds
// into them, then flushed into the global bins with one atomic per non-empty bin.
__device__ __forceinline__ void zero_shared_bins(double* bins, index_t count) {
    for (index_t t = threadIdx.x; t < count; t += blockDim.x) bins[t] = 0.0;
    __syncthreads();
}

__device__ __forceinline__ void flush_shared_bins(const double* bins, double* out,
                                                  index_t count) {
    __syncthreads();
    for (index_t t = threadIdx.x; t < count; t += blockDim.x)
        if (bins[t] != 0.0) atomicAdd(&out[t], bins[t]);
}

template <bool SHARED>
__global__ void quantize_histogram(const double* __restrict__ XT,      // IN  (d, n)
                                   const double* __restrict__ weight,  // IN  (n), null: all 1
                                   index_t n, int d,                   // IN
                                   const double* __restrict__ lo,      // IN  (d)
                                   const double* __restrict__ hi,      // IN  (d)
                                   const index_t* __restrict__ m,      // IN  (d) cells per axis
                                   index_t cells,                      // IN  prod(m)
                                   index_t* __restrict__ point_cell,   // OUT (n) flat, or -1
                                   double* __restrict__ histogram,     // INOUT (cells), zeroed
                                   double* __restrict__ total)         // INOUT (1) zeroed, or null
{
    extern __shared__ double s_hist[];
    __shared__ double s_total[GPUMINE_BLOCK / kWarpSize];
    if (SHARED) zero_shared_bins(s_hist, cells);
    double inside_weight = 0.0;
    for (index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (index_t)gridDim.x * blockDim.x) {
        index_t flat = 0;
        bool inside = true;
        for (int j = 0; j < d; ++j) {
            const double x = XT[(index_t)j * n + i];
            inside = inside && x >= lo[j] && x <= hi[j];
            const double scaled = __dmul_rn(__ddiv_rn(__dsub_rn(x, lo[j]), __dsub_rn(hi[j], lo[j])),
                                            (double)m[j]);
            double c = floor(scaled);
            c = c < 0.0 ? 0.0 : (c > (double)(m[j] - 1) ? (double)(m[j] - 1) : c);
            flat = flat * m[j] + (index_t)c;
        }
        point_cell[i] = inside ? flat : -1;
        if (inside) {
            const double w = weight != nullptr ? weight[i] : 1.0;
            inside_weight += w;
            if (SHARED) atomicAdd(&s_hist[flat], w);
            else atomicAdd(&histogram[flat], w);
        }
    }
    if (SHARED) flush_shared_bins(s_hist, histogram, cells);
    if (total == nullptr) return;  // uniform across the block
    inside_weight = block_all_reduce<GPUMINE_BLOCK>(inside_weight, s_total, Add());
    if (threadIdx.x == 0 && inside_weight != 0.0) atomicAdd(total, inside_weight);
}

// One axis of one low-pass level: out[.., m, ..] = sum_j f[j] * in[.., 2m + 1 - j, ..]
// with zeros outside, taps added in order j = 0, 1, ... skipping zero taps, each product
// and sum rounded separately -- the CPU path's exact arithmetic.
__global__ void lowpass_axis(const double* __restrict__ in,    // IN  grid
                             index_t outer, index_t length, index_t inner,  // IN in = (outer, length, inner)
                             const double* __restrict__ taps,  // IN  (n_taps)
                             int n_taps,                       // IN
                             index_t out_length,               // IN
                             double* __restrict__ out)         // OUT (outer, out_length, inner)
{
    const index_t t = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= outer * out_length * inner) return;
    const index_t k = t % inner;
    const index_t m = (t / inner) % out_length;
    const index_t o = t / (inner * out_length);
    double acc = 0.0;
    bool first = true;
    for (int j = 0; j < n_taps; ++j) {
        if (taps[j] == 0.0) continue;
        const index_t src = 2 * m + 1 - j;
        const double x = (src >= 0 && src < length) ? in[(o * length + src) * inner + k] : 0.0;
        const double term = __dmul_rn(taps[j], x);
        acc = first ? term : __dadd_rn(acc, term);
        first = false;
    }
    out[t] = acc;
}


// A flat index's coordinates in a grid of `extent` (WC_MAX_DIMS axes, 1s in front), the
// divisions in the integer type U: unflatten's index_t, or uf_union's unsigned 32 bits below
// 2^31 cells (UnsignedOf), several times cheaper than 64-bit ones.
template <typename U>
__device__ __forceinline__ void unflatten_in(index_t flat, const index_t* extent, index_t* c) {
    U f = (U)flat;
    for (int a = WC_MAX_DIMS - 1; a >= 0; --a) {
        const U e = (U)extent[a];
        if (e == 1) {  // a padding axis: no division
            c[a] = 0;
            continue;
        }
        c[a] = (index_t)(f % e);
        f /= e;
    }
}

__device__ __forceinline__ void unflatten(index_t flat, const index_t* extent, index_t* c) {
    unflatten_in<index_t>(flat, extent, c);
}

// The unsigned type of a kernel's parents (uf_union's unflatten_in).
template <typename P> struct UnsignedOf { typedef unsigned long long type; };
template <> struct UnsignedOf<int> { typedef unsigned type; };

// One low-pass level of a two-tap filter (haar) over all D axes at once: what lowpass_axis
// computes axis after axis, with the same roundings in the same order. Output cell m reads
// the 2^D cells 2m + 1 - j (j in {0, 1} per axis; zero past the end); leaf bit a is axis a's
// j. Axis 0 is folded first, as the axis loop does: each pair (j = 0, j = 1) becomes
// f0 * v0 + f1 * v1, each product and the sum rounded separately. One thread a cell.
template <int D>
__global__ void lowpass_two_taps(const double* __restrict__ in,         // IN  grid
                                 const index_t* __restrict__ in_shape,  // IN  (8)
                                 const index_t* __restrict__ shape,     // IN  (8) the output's
                                 double f0, double f1,                  // IN  the taps
                                 index_t cells,                         // IN  output cells
                                 double* __restrict__ out)              // OUT (cells)
{
    const index_t t = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= cells) return;
    index_t m[WC_MAX_DIMS];
    unflatten(t, shape, m);
    double v[1 << D];
#pragma unroll
    for (int leaf = 0; leaf < (1 << D); ++leaf) {
        index_t f = 0;
        bool inside = true;
#pragma unroll
        for (int a = 0; a < D; ++a) {
            const int axis = WC_MAX_DIMS - D + a;
            const index_t src = 2 * m[axis] + 1 - ((leaf >> a) & 1);
            inside = inside && src < in_shape[axis];
            f = f * in_shape[axis] + src;
        }
        v[leaf] = inside ? in[f] : 0.0;
    }
#pragma unroll
    for (int a = 0; a < D; ++a) {
#pragma unroll
        for (int c = 0; c < (1 << (D - 1 - a)); ++c)
            v[c] = __dadd_rn(__dmul_rn(f0, v[2 * c]), __dmul_rn(f1, v[2 * c + 1]));
    }
    out[t] = v[0];
}

// Seed 003 Algorithm 2, the sliding window: each thread owns one disjoint window of 2^D
// cells whose origin is 2w + shift per axis (shift in {0,1}: steady, right, down, ...);
// every foreground cell takes the minimum id of the foreground cells of its window that
// are its neighbours under `connectivity` (cells of a window differ by at most 1 per axis;
// they are neighbours when they differ on <= connectivity axes). `changed` is set if any
// id decreased. Windows of one launch are disjoint, so there are no races.
__global__ void sliding_window(index_t* __restrict__ ids,   // INOUT (cells)
                               const index_t* __restrict__ shape,        // IN  (8)
                               int ndim,                    // IN  D <= 4 (trailing axes)
                               int shift_mask,              // IN  bit a: shift axis a by one
                               int connectivity,            // IN
                               index_t windows,             // IN  number of windows
                               const index_t* __restrict__ window_grid,  // IN  (8) windows/axis
                               int* __restrict__ changed)   // OUT flag
{
    const index_t w = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (w >= windows) return;
    index_t origin[WC_MAX_DIMS];
    unflatten(w, window_grid, origin);
    const int first_axis = WC_MAX_DIMS - ndim;
    for (int a = 0; a < WC_MAX_DIMS; ++a) {
        const int bit = a - first_axis;
        origin[a] = bit >= 0 ? 2 * origin[a] + ((shift_mask >> bit) & 1) : 0;
    }
    const int corners = 1 << ndim;
    index_t flat[16];
    index_t value[16];
    bool valid[16];
    for (int q = 0; q < corners; ++q) {
        index_t f = 0;
        bool ok = true;
        for (int a = 0; a < WC_MAX_DIMS; ++a) {
            const int bit = a - first_axis;
            const index_t c = origin[a] + (bit >= 0 ? ((q >> bit) & 1) : 0);
            ok = ok && c < shape[a];
            f = f * shape[a] + (ok ? c : 0);
        }
        valid[q] = ok;
        flat[q] = f;
        value[q] = ok ? ids[f] : 0x7fffffffffffffffLL;
    }
    bool any = false;
    for (int q = 0; q < corners; ++q) {
        if (!valid[q] || value[q] == 0x7fffffffffffffffLL) continue;
        index_t best = value[q];
        for (int r = 0; r < corners; ++r) {
            if (!valid[r] || value[r] == 0x7fffffffffffffffLL) continue;
            if (__popc(q ^ r) <= connectivity && value[r] < best) best = value[r];
        }
        if (best < value[q]) {
            ids[flat[q]] = best;
            any = true;
        }
    }
    if (any) *changed = 1;
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

// uf_unite_root's loop: unite the components of cells a and b (parents in global or shared
// memory) by hooking the larger root under the smaller with a compare-and-swap on the root,
// retried until it sticks (or the roots are one); returns the smaller root, from which a
// caller uniting one cell with each of its neighbours starts the next call (it walks that
// cell's chain once, not once a neighbour). A stale root -- hooked by another thread since
// -- is still an ancestor, so the finds start from it safely.
template <typename I>
__device__ __forceinline__ I uf_unite_root(I* parent, I root, I b) {
    while (true) {
        I x = uf_find<true>(parent, root), y = uf_find<true>(parent, b);
        if (x == y) return x;
        if (x < y) { const I tmp = x; x = y; y = tmp; }
        if (uf_cas(&parent[x], x, y) == x) return y;
    }
}

// Unite the components of cells a and b (uf_unite_root, the root not kept).
template <typename I>
__device__ __forceinline__ void uf_unite(I* parent, I a, I b) {
    uf_unite_root(parent, a, b);
}

// Flat index of the cell at `offset` (WC_MAX_DIMS steps) from coordinates c, or -1 off the
// grid.
__device__ __forceinline__ index_t neighbour_at(const index_t* c, const int* offset,
                                                const index_t* shape) {
    index_t f = 0;
    for (int a = 0; a < WC_MAX_DIMS; ++a) {
        const index_t v = c[a] + offset[a];
        if (v < 0 || v >= shape[a]) return -1;
        f = f * shape[a] + v;
    }
    return f;
}

// Each offset o (half of the neighbourhood) as its flat step and the axes it steps down
// and up (bit a: axis a of the WC_MAX_DIMS): a neighbour is off the grid exactly where the
// offset steps down an axis at which the cell is at index 0, or up one at which it is at
// the last index -- two masks a cell, two ANDs an offset, where a bounds check and a
// multiply per axis and offset cost several times more (5-d stacks of the "auto" rule).
// An offset across two axes or more (a diagonal) is skipped where one of its two `via`
// cells -- the neighbour with one of the offset's axes not stepped, a neighbour of the
// cell and of the diagonal neighbour through smaller offsets -- is foreground: the unions
// of those smaller pairs join the two (by induction on the axes stepped; face pairs are
// always united), so in a dense region a cell makes a union a face, not one a neighbour
// (5 of 25 at connectivity 2 in 5-d). The via cells lie between the cell and its
// neighbour, so on the grid. via: 0 for a face offset (no check).
// P, the parents' type: int below 2^31 cells (the finds' scattered reads move half the
// bytes, and twice as many parents stay in the L2 cache), long long past.
template <typename P>
__global__ void uf_union(const bool* __restrict__ mask,      // IN  (cells) foreground
                         P* parent,                          // INOUT (cells) from 0..cells-1
                         const index_t* __restrict__ shape,  // IN  (8)
                         const index_t* __restrict__ step,   // IN  (n_offsets) flat steps
                         const index_t* __restrict__ via,    // IN  (n_offsets, 2) flat steps
                         const int* __restrict__ down,       // IN  (n_offsets) axes stepped down
                         const int* __restrict__ up,         // IN  (n_offsets) axes stepped up
                         int n_offsets,                      // IN
                         index_t cells)                      // IN
{
    const index_t t = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= cells || !mask[t]) return;
    index_t c[WC_MAX_DIMS];
    unflatten_in<typename UnsignedOf<P>::type>(t, shape, c);
    int first = 0, last = 0;  // the axes at which the cell is at index 0, at the last index
#pragma unroll
    for (int a = 0; a < WC_MAX_DIMS; ++a) {
        first |= (c[a] == 0) << a;
        last |= (c[a] == shape[a] - 1) << a;
    }
    P root = (P)t;
    for (int o = 0; o < n_offsets; ++o) {
        if ((down[o] & first) | (up[o] & last)) continue;
        const index_t f = t + step[o];
        if (!mask[f]) continue;
        const index_t v0 = via[2 * o], v1 = via[2 * o + 1];
        if (v0 != 0 && (mask[t + v0] || mask[t + v1])) continue;  // joined through a via cell
        root = uf_unite_root(parent, root, (P)f);
    }
}

// Every cell its own parent: uf_union's start (CuPy's arange took 53 us a call on the 5-d
// blobs' stacks, H200).
template <typename P>
__global__ void uf_init(P* __restrict__ parent,  // OUT (cells)
                        index_t cells)           // IN
{
    for (index_t t = (index_t)blockIdx.x * blockDim.x + threadIdx.x; t < cells;
         t += (index_t)gridDim.x * blockDim.x)
        parent[t] = (P)t;
}

// The "auto" rule's border and specks (engine.add_border_cells): each candidate cell -- own
// `none` (in no significant cluster), its density at least `occupied` and, with zero_only,
// its component 0 -- takes the least `own` value (a significant cluster's number, `none`
// elsewhere) among the cells of the first ring of offsets that holds one -- rings in order,
// ring r the cells first reached in r + 1 steps of the labelling's neighbourhood (ring_ends:
// each ring's end in `offsets`) -- and keeps `components` where none does; other cells keep
// `components`. What the engine's whole-grid minima compute, in one launch; a thread a cell.
__global__ void nearest_cluster(const index_t* __restrict__ own,         // IN  (cells)
                                const index_t* __restrict__ components,  // IN  (cells)
                                const double* __restrict__ density,      // IN  (cells)
                                double occupied, int zero_only,          // IN
                                const index_t* __restrict__ shape,       // IN  (8)
                                const int* __restrict__ offsets,         // IN  (n, 8)
                                const int* __restrict__ ring_ends,       // IN  (rings)
                                int rings, index_t cells, index_t none,  // IN
                                index_t* __restrict__ out)               // OUT (cells)
{
    const index_t t = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= cells) return;
    index_t best = none;
    if (own[t] == none && density[t] >= occupied && (!zero_only || components[t] == 0)) {
        index_t c[WC_MAX_DIMS];
        unflatten(t, shape, c);
        int o = 0;
        for (int r = 0; r < rings && best == none; ++r) {
            for (; o < ring_ends[r]; ++o) {
                const index_t f = neighbour_at(c, offsets + o * WC_MAX_DIMS, shape);
                if (f >= 0 && own[f] < best) best = own[f];
            }
        }
    }
    out[t] = best < none ? best : components[t];
}

// Up to WC_JOINT_JOBS of levels.split_by_coarser_level's tables in one launch, passed by
// value (gpu._JOINT_PLAN's layout): job j gets blocks [first_block[j], first_block[j + 1]),
// its host tables at tables + cluster_at[j] and tables + piece_at[j], its table at
// mass + mass_at[j].
#define WC_JOINT_JOBS 4
struct JointPlan {
    unsigned long long components[WC_JOINT_JOBS];     // the finer labelling (const index_t*)
    unsigned long long upper[WC_JOINT_JOBS];          // the next level's (const index_t*)
    unsigned long long density[WC_JOINT_JOBS];        // the finer densities (const double*)
    index_t shape[WC_JOINT_JOBS][WC_MAX_DIMS];        // the finer grid's, 1s in front
    index_t upper_shape[WC_JOINT_JOBS][WC_MAX_DIMS];  // the next level's
    index_t cells[WC_JOINT_JOBS];
    index_t width[WC_JOINT_JOBS];
    index_t cluster_at[WC_JOINT_JOBS];
    index_t piece_at[WC_JOINT_JOBS];
    index_t mass_at[WC_JOINT_JOBS];
    index_t first_block[WC_JOINT_JOBS + 1];
    int jobs, unused;
};

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

// Each job's table: each finer cell's density added to bin (cluster_index[components[c]],
// piece_index[upper[c / 2]]) of a (clusters + 1) x width table -- cell c of the finer grid
// lies in cell c / 2 (per axis) of the next level. Bin 0 (outside every cluster and piece)
// is not counted. One thread a cell, grid-stride over the job's blocks.
__global__ void joint_mass(const JointPlan plan,                // IN  (by value)
                           const index_t* __restrict__ tables,  // IN  every job's two tables
                           double* __restrict__ mass)           // INOUT every job's, zeroed
{
    int j = 0;
    while (j + 1 < plan.jobs && (index_t)blockIdx.x >= plan.first_block[j + 1]) ++j;
    const index_t block = (index_t)blockIdx.x - plan.first_block[j];
    const index_t blocks = plan.first_block[j + 1] - plan.first_block[j];
    const index_t* components = (const index_t*)plan.components[j];
    const index_t* upper = (const index_t*)plan.upper[j];
    const double* density = (const double*)plan.density[j];
    const index_t* cluster_index = tables + plan.cluster_at[j];
    const index_t* piece_index = tables + plan.piece_at[j];
    const index_t cells = plan.cells[j], width = plan.width[j];
    double* out = mass + plan.mass_at[j];
    for (index_t base = block * blockDim.x; base < cells; base += blocks * blockDim.x) {
        const index_t t = base + threadIdx.x;  // whole warps step together (warp_add)
        index_t bin = 0;
        if (t < cells) {
            index_t c[WC_MAX_DIMS];
            unflatten(t, plan.shape[j], c);
            index_t f = 0;
            for (int a = 0; a < WC_MAX_DIMS; ++a) f = f * plan.upper_shape[j][a] + c[a] / 2;
            bin = cluster_index[components[t]] * width + piece_index[upper[f]];
        }
        warp_add(out, bin, bin != 0 ? density[t] : 0.0);
    }
}

// An order-preserving image of a double as an unsigned integer (larger double, larger
// image; 0 below every image of a number), so that atomicMax keeps exact maxima of any sign.
__device__ __forceinline__ unsigned long long ordered_bits(double v) {
    const unsigned long long b = (unsigned long long)__double_as_longlong(v);
    return (b >> 63) ? ~b : (b | 0x8000000000000000ull);
}
__device__ __forceinline__ double from_ordered_bits(unsigned long long b) {
    return __longlong_as_double((long long)((b >> 63) ? (b & 0x7fffffffffffffffull) : ~b));
}

// The "auto" rule's look at up to WC_SUMMARY_GRIDS grids in one launch (engine._summaries),
// passed by value (gpu._SUMMARY_PLAN's layout): grid g gets blocks [first_block[g],
// first_block[g + 1]) of the launch and its own slots in one buffer -- out[g]: [mass,
// profile of axis 0 (shape[0] values), axis 1, ...], zeroed; partial[g]: a double a block;
// done[g]: a zeroed counter.
#define WC_SUMMARY_GRIDS 4
struct SummaryPlan {
    unsigned long long grid[WC_SUMMARY_GRIDS];     // each grid's densities (const double*)
    index_t shape[WC_SUMMARY_GRIDS][WC_MAX_DIMS];  // its shape, 1s in front
    index_t cells[WC_SUMMARY_GRIDS];
    index_t first_block[WC_SUMMARY_GRIDS + 1];
    index_t out[WC_SUMMARY_GRIDS];                 // offsets in the buffer, in doubles
    index_t partial[WC_SUMMARY_GRIDS];
    index_t done[WC_SUMMARY_GRIDS];
    int grids, ndim;
};

// Each grid's mass and, per axis, the densest cell at each index (the axis's profile: the
// grid's max over the other axes). The profiles are exact maxima, each kept as its
// ordered_bits by atomicMax (warp-reduced where a whole warp shares the index; skipped where
// the slot already holds as much: a stale read is never more than the slot's value, so the
// skip is safe, and an axis of a few indices is not one atomic a cell) and turned
// back into doubles by the grid's last block. The mass is deterministic: each block adds its
// cells in a grid-stride loop over the grid's blocks and a block reduction into its partial;
// the grid's last block to finish adds the partials in a fixed order. The first block of the
// first grid writes the weight (*weight, or host_weight where weight is null) to buffer[0]
// (the caller's one transfer).
__global__ void __launch_bounds__(GPUMINE_BLOCK)
grid_summary(const SummaryPlan plan,               // IN  (by value)
             const double* weight,                 // IN  (1) or null
             double host_weight,                   // IN
             double* buffer)                       // INOUT zeroed slots, see SummaryPlan
{
    __shared__ double s_sum[GPUMINE_BLOCK / kWarpSize];
    __shared__ bool s_last;
    int g = 0;
    while (g + 1 < plan.grids && (index_t)blockIdx.x >= plan.first_block[g + 1]) ++g;
    const index_t block = (index_t)blockIdx.x - plan.first_block[g];
    const index_t blocks = plan.first_block[g + 1] - plan.first_block[g];
    const double* grid = (const double*)plan.grid[g];
    const index_t* shape = plan.shape[g];
    const index_t cells = plan.cells[g];
    const int ndim = plan.ndim;
    double* out = buffer + plan.out[g];
    double* partial = buffer + plan.partial[g];
    unsigned long long* done = (unsigned long long*)(buffer + plan.done[g]);
    unsigned long long* keys = (unsigned long long*)(out + 1);
    const int lane = threadIdx.x & (kWarpSize - 1);
    double sum = 0.0;
    for (index_t base = block * blockDim.x; base < cells; base += blocks * blockDim.x) {
        const index_t t = base + threadIdx.x;
        const bool live = t < cells;
        const double v = live ? grid[t] : 0.0;
        sum += v;
        const unsigned long long key = live ? ordered_bits(v) : 0ull;
        index_t c[WC_MAX_DIMS];
        unflatten(live ? t : 0, shape, c);
        index_t offset = 0;
        for (int a = WC_MAX_DIMS - ndim; a < WC_MAX_DIMS; ++a) {
            const index_t slot = offset + c[a];
            offset += shape[a];
            const index_t first = __shfl_sync(0xffffffffu, slot, 0);
            if (__all_sync(0xffffffffu, slot == first || !live)) {
                unsigned long long m = key;
                for (int o = kWarpSize / 2; o > 0; o >>= 1) {
                    const unsigned long long other = __shfl_xor_sync(0xffffffffu, m, o);
                    m = other > m ? other : m;
                }
                if (lane == 0 && m > keys[first]) atomicMax(&keys[first], m);
            } else if (live && key > keys[slot]) {
                atomicMax(&keys[slot], key);
            }
        }
    }
    sum = block_all_reduce<GPUMINE_BLOCK>(sum, s_sum, Add());
    if (threadIdx.x == 0) {
        partial[block] = sum;
        if (g == 0 && block == 0) buffer[0] = weight != nullptr ? *weight : host_weight;
        __threadfence();
        s_last = atomicAdd(done, 1ull) == (unsigned long long)blocks - 1;
    }
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    double total = 0.0;
    for (index_t b = threadIdx.x; b < blocks; b += blockDim.x) total += __ldcg(&partial[b]);
    total = block_all_reduce<GPUMINE_BLOCK>(total, s_sum, Add());
    if (threadIdx.x == 0) out[0] = total;
    index_t profile_cells = 0;
    for (int a = WC_MAX_DIMS - ndim; a < WC_MAX_DIMS; ++a) profile_cells += shape[a];
    for (index_t i = threadIdx.x; i < profile_cells; i += blockDim.x)
        out[1 + i] = from_ordered_bits(atomicAdd(&keys[i], 0ull));
}

// A stack of labelled levels (hierarchy._read): each component's parent -- the number its
// cells hold in the plane below (every cell of a component of plane p + 1 lies in one
// component of plane p) -- and each plane's largest number, written as doubles into the
// caller's one transfer: tops (m), the masses' slot (n + 1, not touched), parents (n + 1).
// The planes' tops are warp-reduced and kept by atomicMax on the doubles' bits (numbers are
// non-negative, so their bits order as they do). packed is zeroed. One thread a cell.
__global__ void stack_tree(const index_t* __restrict__ labels,  // IN  (m, plane_cells)
                           index_t m, index_t plane_cells,      // IN
                           index_t n,                           // IN  numbers 1..n
                           double* packed)                      // INOUT (m + 2 (n + 1)) zeroed
{
    const int lane = threadIdx.x & (kWarpSize - 1);
    double* up = packed + m + n + 1;
    const index_t cells = m * plane_cells;
    for (index_t base = (index_t)blockIdx.x * blockDim.x; base < cells;
         base += (index_t)gridDim.x * blockDim.x) {
        const index_t t = base + threadIdx.x;
        const bool live = t < cells;
        const index_t v = live ? labels[t] : 0;
        const index_t plane = live ? t / plane_cells : -1;
        if (v != 0 && t >= plane_cells) up[v] = (double)labels[t - plane_cells];
        const index_t first = __shfl_sync(0xffffffffu, plane, 0);
        if (__all_sync(0xffffffffu, plane == first || !live)) {
            index_t top = v;
            for (int o = kWarpSize / 2; o > 0; o >>= 1) {
                const index_t other = __shfl_xor_sync(0xffffffffu, top, o);
                top = other > top ? other : top;
            }
            if (lane == 0 && top != 0)
                atomicMax((unsigned long long*)&packed[first],
                          (unsigned long long)__double_as_longlong((double)top));
        } else if (v != 0) {
            atomicMax((unsigned long long*)&packed[plane],
                      (unsigned long long)__double_as_longlong((double)v));
        }
    }
}

// The planes of a stack of levels (hierarchy._LevelStack.shared), passed by value (a kernel
// parameter: nothing uploaded). Each plane p holds grid grid_of[p]'s box in its corner, zeros
// elsewhere; its level is density >= threshold[p]. Layout: numpy's aligned structured dtype
// gpu._STACK_PLAN (8-byte fields, no padding).
#define WC_STACK_GRIDS 4
#define WC_STACK_PLANES 128
struct StackPlan {
    unsigned long long grid[WC_STACK_GRIDS];       // each grid's densities (const double*)
    index_t shape[WC_STACK_GRIDS][WC_MAX_DIMS];    // its shape, 1s in front
    index_t start[WC_STACK_GRIDS][WC_MAX_DIMS];    // its box's start, 0s in front
    index_t extent[WC_STACK_GRIDS][WC_MAX_DIMS];   // its box's extent, 1s in front
    index_t plane[WC_MAX_DIMS];                    // the planes' common shape, 1s in front
    double threshold[WC_STACK_PLANES];             // each plane's level
    int grid_of[WC_STACK_PLANES];                  // each plane's grid
};

// Planes [first, first + planes) of a stack in one launch: the densities each plane holds
// and its level's mask, where CuPy takes a zeroed buffer, a copy a grid, a threshold upload
// and a comparison. One thread a cell.
__global__ void stack_build(const StackPlan plan,           // IN  (by value)
                            index_t first, index_t planes,  // IN
                            index_t plane_cells,            // IN
                            double* __restrict__ weights,   // OUT (stack cells)
                            bool* __restrict__ mask)        // OUT (stack cells)
{
    const index_t t = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= planes * plane_cells) return;
    const index_t p = t / plane_cells;
    const int g = plan.grid_of[p];
    index_t c[WC_MAX_DIMS];
    unflatten(t - p * plane_cells, plan.plane, c);
    index_t f = 0;
    bool inside = true;
    for (int a = 0; a < WC_MAX_DIMS; ++a) {
        inside = inside && c[a] < plan.extent[g][a];
        f = f * plan.shape[g][a] + plan.start[g][a] + c[a];
    }
    const double v = inside ? ((const double*)plan.grid[g])[f] : 0.0;
    const index_t out = first * plane_cells + t;
    weights[out] = v;
    mask[out] = v >= plan.threshold[p];
}

// A grid and a stack's plane (stack_plane, stack_paint), passed by value (gpu._GEOMETRY's
// layout): the grid's shape (8), the plane's (8), the box's start (8) and extent (8).
struct PlaneGeometry {
    index_t v[4 * WC_MAX_DIMS];
};

// Cell t of a grid in a stack's plane: its flat index in the plane, whose corner holds the
// box, or -1 outside the box.
__device__ __forceinline__ index_t plane_cell(index_t t, const index_t* geometry) {
    index_t c[WC_MAX_DIMS];
    unflatten(t, geometry, c);
    index_t f = 0;
    for (int a = 0; a < WC_MAX_DIMS; ++a) {
        const index_t i = c[a] - geometry[2 * WC_MAX_DIMS + a];
        if (i < 0 || i >= geometry[3 * WC_MAX_DIMS + a]) return -1;
        f = f * geometry[WC_MAX_DIMS + a] + i;
    }
    return f;
}

// One level of a stack as a labelling of the grid (hierarchy._LevelStack.labelling): cell c
// of the grid takes plane[c - box start] less `start` (the plane's numbers run from
// start + 1; its zeros stay 0) inside the box, 0 outside (geometry: plane_cell's). One
// thread a cell.
__global__ void stack_plane(const index_t* __restrict__ plane,     // IN  (plane cells)
                            const PlaneGeometry geometry,          // IN  (by value)
                            index_t start, index_t cells,          // IN
                            index_t* __restrict__ out)             // OUT (cells)
{
    const index_t t = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= cells) return;
    const index_t f = plane_cell(t, geometry.v);
    const index_t v = f < 0 ? 0 : plane[f];  // outside the box: 0 (start >= 0)
    out[t] = v > start ? v - start : 0;
}

// A stack's levels painted onto the grid at once (hierarchy._paint_kept): cell c of the grid
// takes table[v] for the first of the `count` planes whose number v at c (the plane's cell
// c - box start, inside the box) has table[v] != 0, else 0. The planes hold the stack's own
// numbers (not less a plane's start); the table maps them to clusters (or marks a region:
// 0 / 1). geometry as stack_plane's. One thread a cell.
__global__ void stack_paint(const index_t* __restrict__ planes,    // IN  (count, plane cells)
                            int count, index_t plane_cells,        // IN
                            const index_t* __restrict__ table,     // IN  (numbers + 1)
                            const PlaneGeometry geometry,          // IN  (by value)
                            index_t cells,                         // IN
                            index_t* __restrict__ out)             // OUT (cells)
{
    const index_t t = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= cells) return;
    const index_t f = plane_cell(t, geometry.v);
    index_t value = 0;  // outside the box (f < 0): no plane is read
    for (int p = 0; f >= 0 && p < count && value == 0; ++p)
        value = table[planes[p * plane_cells + f]];
    out[t] = value;
}

// Union-find of a 2-d grid in two passes, for dense grids where one-pass hooking makes
// every cell contend for the few roots of a large component. Pass 1 (uf_tile_2d): a block
// labels one UF_TILE x UF_TILE tile in shared memory (the same hooking, by local index,
// whose row-major order within a tile is the flat order), then writes every cell's parent:
// its local root's flat index (the smallest of its tile's part of the component), or
// itself for the background. Pass 2 (uf_border_2d): the unions between cells of different
// tiles, by uf_unite on the global parents. Each neighbour pair is united in exactly one
// pass, except a diagonal neighbour below when the cell below (or, below-right, the cell to
// the right) is foreground: the other pairs' unions join those two (uf_diagonal_skipped), so
// a dense region makes two hooking attempts per cell, not four. uf_compress_count then points
// every cell at its root as after the one-pass union.
#define UF_TILE 32

// Whether the pair (cell (r, c), its neighbour at (dr, dc)) is left to others' unions: a
// diagonal below, when the cell below is foreground or (below-right) the cell to the right.
__device__ __forceinline__ bool uf_diagonal_skipped(int dr, int dc, bool below, bool right) {
    return dr == 1 && dc != 0 && (below || (dc == 1 && right));
}

template <typename P>
__global__ void __launch_bounds__(GPUMINE_BLOCK)
uf_tile_2d(const bool* __restrict__ mask,  // IN  (rows, cols) foreground
           P* __restrict__ parent,         // OUT (rows, cols)
           int rows, int cols,             // IN  rows * cols < 2^31
           int connectivity)               // IN  1 or 2
{
    __shared__ int local[UF_TILE * UF_TILE];
    __shared__ bool fore[UF_TILE * UF_TILE];
    const int r0 = blockIdx.y * UF_TILE, c0 = blockIdx.x * UF_TILE;
    for (int t = threadIdx.x; t < UF_TILE * UF_TILE; t += blockDim.x) {
        const int r = r0 + t / UF_TILE, c = c0 + t % UF_TILE;
        fore[t] = r < rows && c < cols && mask[r * cols + c];
        local[t] = t;
    }
    __syncthreads();
    const int dr[4] = {0, 1, 1, 1}, dc[4] = {1, -1, 0, 1};
    for (int t = threadIdx.x; t < UF_TILE * UF_TILE; t += blockDim.x) {
        if (!fore[t]) continue;
        const int r = t / UF_TILE, c = t % UF_TILE;
        const bool below = r + 1 < UF_TILE ? fore[t + UF_TILE]
                           : r0 + r + 1 < rows && mask[(r0 + r + 1) * cols + c0 + c];
        const bool right = c + 1 < UF_TILE ? fore[t + 1]
                           : c0 + c + 1 < cols && mask[(r0 + r) * cols + c0 + c + 1];
        for (int o = 0; o < 4; ++o) {
            if (connectivity == 1 && dc[o] != 0 && dr[o] != 0) continue;
            if (uf_diagonal_skipped(dr[o], dc[o], below, right)) continue;
            const int nr = r + dr[o], nc = c + dc[o];
            if (nr >= UF_TILE || nc < 0 || nc >= UF_TILE) continue;  // another tile's pair
            if (fore[nr * UF_TILE + nc]) uf_unite(local, t, nr * UF_TILE + nc);
        }
    }
    __syncthreads();
    for (int t = threadIdx.x; t < UF_TILE * UF_TILE; t += blockDim.x) {
        const int r = r0 + t / UF_TILE, c = c0 + t % UF_TILE;
        if (r >= rows || c >= cols) continue;
        int root = t;
        if (fore[t]) {
            root = uf_find<true>(local, t);
        }
        parent[(index_t)r * cols + c] =
            (P)((index_t)(r0 + root / UF_TILE) * cols + c0 + root % UF_TILE);
    }
}

template <typename P>
__global__ void uf_border_2d(const bool* __restrict__ mask,  // IN  (rows, cols)
                             P* parent,                      // INOUT (rows, cols)
                             int rows, int cols,             // IN
                             int connectivity)               // IN  1 or 2
{
    const index_t g = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= (index_t)rows * cols) return;
    const int r = (int)(g / cols), c = (int)(g - (index_t)r * cols);
    const bool last_row = r % UF_TILE == UF_TILE - 1, edge_col = c % UF_TILE == UF_TILE - 1
                                                                 || c % UF_TILE == 0;
    if ((!last_row && !edge_col) || !mask[g]) return;  // interior: its pairs were pass 1's
    const bool below = r + 1 < rows && mask[g + cols];
    const bool right = c + 1 < cols && mask[g + 1];
    const int dr[4] = {0, 1, 1, 1}, dc[4] = {1, -1, 0, 1};
    for (int o = 0; o < 4; ++o) {
        if (connectivity == 1 && dc[o] != 0 && dr[o] != 0) continue;
        if (uf_diagonal_skipped(dr[o], dc[o], below, right)) continue;
        const int nr = r + dr[o], nc = c + dc[o];
        if (nr >= rows || nc < 0 || nc >= cols) continue;
        if (nr / UF_TILE == r / UF_TILE && nc / UF_TILE == c / UF_TILE) continue;  // pass 1's
        const index_t f = (index_t)nr * cols + nc;
        if (mask[f]) uf_unite(parent, (P)g, (P)f);
    }
}

// The union's last pass, and the count for _compact's numbering: every foreground cell
// pointed at its root (uf_find without splitting), and each block's count of roots -- the
// foreground cells that are their own root, one a component -- in block_roots. One thread
// a cell: block b takes cells [b * GPUMINE_BLOCK, (b + 1) * GPUMINE_BLOCK), as
// component_rank does. P: the parents' type (uf_union), also the counts'.
template <typename P>
__global__ void __launch_bounds__(GPUMINE_BLOCK)
uf_compress_count(const bool* __restrict__ mask,  // IN  (cells) foreground
                  P* parent,                      // INOUT (cells) background: untouched
                  index_t cells,                  // IN
                  P* __restrict__ block_roots)    // OUT (blocks) roots in each block
{
    const index_t t = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    bool root = false;
    if (t < cells && mask[t]) {
        const P r = uf_find<false>(parent, (P)t);
        parent[t] = r;
        root = r == (P)t;
    }
    const int roots = __syncthreads_count(root);
    if (threadIdx.x == 0) block_roots[blockIdx.x] = (P)roots;
}

// A root's component number, written at the root alone (component_numbers reads no other):
// the roots before it in flat order, plus one -- those of the blocks before its own
// (block_ends: the inclusive prefix sum of uf_compress_count's counts), then those before
// it in its block (a ballot a warp). A block without a root reads nothing else. Block b
// takes uf_compress_count's cells.
template <typename P>
__global__ void __launch_bounds__(GPUMINE_BLOCK)
component_rank(const bool* __restrict__ mask,        // IN  (cells) foreground
               const P* __restrict__ parent,         // IN  (cells) each cell's root
               index_t cells,                        // IN
               const P* __restrict__ block_ends,     // IN  (blocks) inclusive prefix sum
               P* __restrict__ rank)                 // OUT (cells) written at roots only
{
    __shared__ P warp_roots[GPUMINE_BLOCK / 32];
    const P before = blockIdx.x ? block_ends[blockIdx.x - 1] : P(0);
    if (block_ends[blockIdx.x] == before) return;  // no root here (the whole block leaves)
    const index_t t = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    const bool root = t < cells && mask[t] && parent[t] == (P)t;
    const unsigned ballot = __ballot_sync(0xffffffffu, root);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_roots[warp] = (P)__popc(ballot);
    __syncthreads();
    if (!root) return;
    P number = before + (P)__popc(ballot & ((1u << lane) - 1u)) + P(1);
    for (int w = 0; w < warp; ++w) number += warp_roots[w];
    rank[t] = number;
}

// A foreground cell's component number: its root's (component_rank); 0 for the background.
template <typename P>
__global__ void component_numbers(const bool* __restrict__ mask,     // IN  (cells)
                                  const P* __restrict__ parent,      // IN  (cells) roots
                                  const P* __restrict__ rank,        // IN  (cells) at roots
                                  index_t cells,                     // IN
                                  index_t* __restrict__ labels)      // OUT (cells)
{
    for (index_t t = (index_t)blockIdx.x * blockDim.x + threadIdx.x; t < cells;
         t += (index_t)gridDim.x * blockDim.x)
        labels[t] = mask[t] ? (index_t)rank[parent[t]] : index_t(0);
}

// Component of every point: its flat fine cell (-1 outside the bounds: `outside`) mapped
// to the coarse cell of the CPU rule (per axis min((c + offset) / scale, coarse - 1)) and
// looked up in the coarse grid's component numbers. One pass, no (n, d) temporaries.
__global__ void point_components(const index_t* __restrict__ point_cell,  // IN  (n)
                                 index_t n, int d,                        // IN
                                 const index_t* __restrict__ fine,        // IN  (d) fine extents
                                 const index_t* __restrict__ coarse,      // IN  (d) coarse extents
                                 index_t offset, index_t scale,           // IN
                                 const index_t* __restrict__ components,  // IN  (coarse cells)
                                 index_t outside,                         // IN  for cell -1
                                 index_t* __restrict__ out)               // OUT (n)
{
    for (index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (index_t)gridDim.x * blockDim.x) {
        index_t cell = point_cell[i];
        if (cell < 0) {
            out[i] = outside;
            continue;
        }
        index_t flat = 0, stride = 1;
        for (int j = d - 1; j >= 0; --j) {
            const index_t c = cell % fine[j];
            cell /= fine[j];
            index_t q = (c + offset) / scale;
            q = q < coarse[j] - 1 ? q : coarse[j] - 1;
            flat += q * stride;
            stride *= coarse[j];
        }
        out[i] = components[flat];
    }
}

// Weighted histogram of small non-negative integers (component sizes): per-block shared
// bins when `bins` doubles fit (SHARED), flushed with one atomic per non-empty bin, so a few
// heavily used bins do not serialize global atomics; otherwise global atomics. Value 0 (the
// background, or outside the grid) is not counted: its bin stays 0. It is most of the values
// and, with global atomics, all of them would serialize on that one bin. Value i weighs
// weight[i % period]: a stack's planes share one plane's densities (period: its cells;
// n where every value has its own weight), which are not copied once a plane.
template <bool SHARED>
__global__ void weighted_bincount(const index_t* __restrict__ values,  // IN  (n) in [0, bins)
                                  const double* __restrict__ weight,   // IN  (period), null: all 1
                                  index_t n, index_t bins,             // IN
                                  index_t period,                      // IN  1..n
                                  double* __restrict__ out)            // INOUT (bins), zeroed
{
    extern __shared__ double s_bins[];
    if (SHARED) zero_shared_bins(s_bins, bins);
    // Whole warps step together (a lane past n holds bin 0), so that the lanes of one bin
    // can be found (__match_any_sync) and their weights summed by shuffles: one atomic per
    // distinct bin of a warp instead of one per value (a few large clusters hold most points).
    const int lane = threadIdx.x & 31;
    const index_t stride = (index_t)gridDim.x * blockDim.x;
    const index_t step = stride % period;  // i % period follows i by a step, not a division
    index_t at = ((index_t)blockIdx.x * blockDim.x + threadIdx.x) % period;
    for (index_t base = (index_t)blockIdx.x * blockDim.x; base < n; base += stride) {
        const index_t i = base + threadIdx.x;
        const index_t v = i < n ? values[i] : 0;
        const double w = v == 0 ? 0.0 : (weight != nullptr ? weight[at] : 1.0);
        at += step;
        if (at >= period) at -= period;
        const unsigned peers = __match_any_sync(0xffffffffu, (unsigned long long)v);
        double sum = 0.0;
        if (peers == 0xffffffffu) {  // one bin in the whole warp: a butterfly
            sum = w;
            for (int offset = 16; offset > 0; offset >>= 1)
                sum += __shfl_xor_sync(0xffffffffu, sum, offset);
        } else {
            for (unsigned rest = peers; rest; rest &= rest - 1)
                sum += __shfl_sync(peers, w, __ffs(rest) - 1);
        }
        if (v != 0 && lane == __ffs(peers) - 1) {
            if (SHARED) atomicAdd(&s_bins[v], sum);
            else atomicAdd(&out[v], sum);
        }
    }
    if (SHARED) flush_shared_bins(s_bins, out, bins);
}
