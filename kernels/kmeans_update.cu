// k-means update kernels: per-cluster weighted sums (k x d) and weights (k), accumulated in
// double whatever T is (a float32 running sum over a million points would lose ~1e-4).
// X is column-major: feature j of point i at XT[j * n + i]. sums and weights are zeroed by
// the caller unless a kernel says otherwise.
#include "common.cuh"

// ---------------------------------------------------------------------------------------
// atomic (NVIDIA's kmeans sample): global atomics, or shared-memory privatized atomics
// when k * (d + 1) doubles fit in a block's shared memory.
template <typename T>
__global__ void update_atomic_global(const T* __restrict__ XT,            // IN  (d, n)
                                     const int* __restrict__ labels,      // IN  (n)
                                     const T* __restrict__ sample_weight, // IN  (n)
                                     index_t n, int d,                    // IN
                                     double* __restrict__ sums,           // INOUT (k, d)
                                     double* __restrict__ weights)        // INOUT (k)
{
    for (index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (index_t)gridDim.x * blockDim.x) {
        const int label = labels[i];
        const double w = sample_weight[i];
        atomicAdd(&weights[label], w);
        for (int j = 0; j < d; ++j)
            atomicAdd(&sums[(index_t)label * d + j], (double)XT[(index_t)j * n + i] * w);
    }
}

// Shared accumulators are of type A: float for float data (half the shared memory; a
// block's partial sums cover a few thousand to ~100k points), double for double data; they
// are flushed into the double global sums. On sm_90 a shared float atomicAdd compiles to a
// compare-and-swap loop too, not a native add (benchmarks/results/
// sass-update-atomic-shared-sm90-2026-11-26-4d8ea15.txt). Blocks along y take slices of `slice` features each (the last one what is
// left), so k * (slice + 1) partials fit a block where k * (d + 1) do not; the slice-0
// blocks add the weights.
// At most ATOMIC_WIDE_BLOCK (1024) threads a block.
template <typename T, typename A>
__global__ void __launch_bounds__(1024)
update_atomic_shared(const T* __restrict__ XT,             // IN  (d, n)
                     const int* __restrict__ labels,       // IN  (n)
                     const T* __restrict__ sample_weight,  // IN  (n)
                     index_t n, int d, int k,              // IN
                     int slice,                            // IN  features a y block
                     double* __restrict__ sums,            // INOUT (k, d)
                     double* __restrict__ weights)         // INOUT (k)
{
    extern __shared__ unsigned char shared_atomic_raw[];
    const int j0 = blockIdx.y * slice;
    const int dj = min(slice, d - j0);
    const bool weighs = blockIdx.y == 0;
    // k rows of odd_stride(dj) sums, then k weights
    const int stride = odd_stride(dj);
    A* shared_acc = reinterpret_cast<A*>(shared_atomic_raw);
    A* shared_weights = shared_acc + (index_t)k * stride;
    for (int t = threadIdx.x; t < k * (stride + 1); t += blockDim.x) shared_acc[t] = A(0);
    __syncthreads();
    const T* XS = XT + (index_t)j0 * n;
    // A point's features are loaded HOLD at a time, every load issued before the first add:
    // loaded one per add, each waited on memory behind the add before it (on the H100,
    // 1M x 128, k = 1024 0.63 -> 0.41 ms, 10M x 32 1.49 -> 0.90; 8 against 16 a little
    // slower there, faster at d = 2: update-hold-ab-h100-2026-11-27-*).
    constexpr int HOLD = 8;
    for (index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (index_t)gridDim.x * blockDim.x) {
        const int label = labels[i];
        const A w = (A)sample_weight[i];
        if (weighs) atomicAdd(&shared_weights[label], w);
        A* acc = shared_acc + label * stride;
        for (int jh = 0; jh < dj; jh += HOLD) {
            A v[HOLD];
#pragma unroll
            for (int h = 0; h < HOLD; ++h)
                v[h] = jh + h < dj ? (A)XS[(index_t)(jh + h) * n + i] : A(0);
#pragma unroll
            for (int h = 0; h < HOLD; ++h)
                if (jh + h < dj) atomicAdd(&acc[jh + h], v[h] * w);
        }
    }
    __syncthreads();
    for (int t = threadIdx.x; t < k * (dj + 1); t += blockDim.x) {  // t: (k, dj) then k
        const int c = t / dj;
        const bool is_sum = t < k * dj;
        const double value = (double)(is_sum ? shared_acc[c * stride + (t - c * dj)]
                                             : shared_weights[t - k * dj]);
        if (value != 0.0) {
            if (is_sum) atomicAdd(&sums[(index_t)c * d + j0 + (t - c * dj)], value);
            else if (weighs) atomicAdd(&weights[t - k * dj], value);
        }
    }
}

// Whether a call of a run whose fixed-point sums follow the moved rows (fixed_moves) takes
// the moves: not when a recomputation was requested (*reset: a new run, or labels relocated
// outside the assignment) or the list overflowed (more than `capacity` moves). fixed_moves
// and update_fixed_shared decide alike, so exactly one of them changes the sums.
__device__ __forceinline__ bool follows_moves(const int* reset, unsigned count,
                                              unsigned capacity) {
    return *reset == 0 && count <= capacity;
}

// Fixed point (update="atomic-fixed"): update_atomic_shared's privatized sums as 64-bit
// integers, each point's x_j * w rounded to a multiple of a per-feature quantum 2^-s_j
// (scales[j] = 2^s_j, chosen by the caller so n * max|x_j w| * 2^s_j <= 2^62; the weights'
// scale is scales[d]). Integer sums are exact and their order does not matter: the sums
// are the same run to run whatever order the atomics land in, including the flush into the
// global 64-bit integers (the float64 sums' memory, read back as integers by
// fixed_to_double). A shared 64-bit add is a compare-and-swap loop on sm_90 but a 32-bit
// add is native, so the value is added as two words: the low word's old value says whether
// it carried into the high word (benchmarks/results/fixed-update-ab-h100-2026-11-28-*).
// Dynamic shared memory: k * (odd_stride(slice) + 1) 8-byte partials. At most 1024 threads.
__device__ __forceinline__ void add_fixed(unsigned long long* target, long long value) {
    unsigned int* word = reinterpret_cast<unsigned int*>(target);  // little-endian: low first
    const unsigned int low = (unsigned int)value;
    const unsigned int old = atomicAdd(word, low);
    const unsigned int high = (unsigned int)((unsigned long long)value >> 32)
                              + (old + low < old ? 1u : 0u);  // the low word's carry
    if (high) atomicAdd(word + 1, high);
}

template <typename T>
__global__ void __launch_bounds__(1024)
update_fixed_shared(const T* __restrict__ XT,             // IN  (d, n)
                    const int* __restrict__ labels,       // IN  (n)
                    const T* __restrict__ sample_weight,  // IN  (n)
                    index_t n, int d, int k,              // IN
                    int slice,                            // IN  features a y block
                    const double* __restrict__ scales,    // IN  (d + 1) 2^s_j, the weights' last
                    unsigned long long* __restrict__ sums,     // INOUT (k, d) fixed point
                    unsigned long long* __restrict__ weights,  // INOUT (k) fixed point
                    const int* reset,                     // IN  (1) or null: see fixed_moves
                    const unsigned* moves_count,          // IN  (1) or null: always sum
                    unsigned move_capacity)               // IN
{
    // Following the assignment's moves, fixed_moves has updated the sums: nothing to add.
    if (moves_count != nullptr && follows_moves(reset, *moves_count, move_capacity)) return;
    extern __shared__ unsigned long long shared_fixed_raw[];
    const int j0 = blockIdx.y * slice;
    const int dj = min(slice, d - j0);
    const bool weighs = blockIdx.y == 0;
    const int stride = odd_stride(dj);
    unsigned long long* shared_acc = shared_fixed_raw;  // k rows of stride, then k weights
    unsigned long long* shared_weights = shared_acc + (index_t)k * stride;
    for (int t = threadIdx.x; t < k * (stride + 1); t += blockDim.x) shared_acc[t] = 0ull;
    __syncthreads();
    const T* XS = XT + (index_t)j0 * n;
    const double weight_scale = scales[d];
    // HOLD features loaded before the first add, as update_atomic_shared does
    constexpr int HOLD = 8;
    for (index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (index_t)gridDim.x * blockDim.x) {
        const int label = labels[i];
        const double w = (double)sample_weight[i];
        if (weighs) add_fixed(&shared_weights[label], __double2ll_rn(w * weight_scale));
        unsigned long long* acc = shared_acc + label * stride;
        for (int jh = 0; jh < dj; jh += HOLD) {
            double v[HOLD];
#pragma unroll
            for (int h = 0; h < HOLD; ++h)
                v[h] = jh + h < dj ? (double)XS[(index_t)(jh + h) * n + i] : 0.0;
#pragma unroll
            for (int h = 0; h < HOLD; ++h)  // x * w exact in double for float data
                if (jh + h < dj)
                    add_fixed(&acc[jh + h], __double2ll_rn(v[h] * w * scales[j0 + jh + h]));
        }
    }
    __syncthreads();
    for (int t = threadIdx.x; t < k * (dj + 1); t += blockDim.x) {  // t: (k, dj) then k
        const int c = t / dj;
        const bool is_sum = t < k * dj;
        const unsigned long long value = is_sum ? shared_acc[c * stride + (t - c * dj)]
                                                : shared_weights[t - k * dj];
        if (value != 0ull) {
            if (is_sum) atomicAdd(&sums[(index_t)c * d + j0 + (t - c * dj)], value);
            else if (weighs) atomicAdd(&weights[t - k * dj], value);
        }
    }
}

// update="atomic-fixed"'s quanta (gpumine.kmeans.gpu.fixed_scales, the host reference):
// first the largest |x_j| of every feature j < d and, as "feature" d, the largest |w|, as
// float bits by atomicMax (non-negative floats order as their bits; `maxima` zeroed by the
// caller). Block row y takes features y, y + gridDim.y, ..., its blocks stride over n.
__global__ void __launch_bounds__(256)
fixed_maxima(const float* __restrict__ XT,             // IN  (d, n)
             const float* __restrict__ sample_weight,  // IN  (n)
             index_t n, int d,                         // IN
             unsigned* __restrict__ maxima)            // INOUT (d + 1) float bits
{
    __shared__ unsigned block_max;
    for (int j = blockIdx.y; j <= d; j += gridDim.y) {
        const float* values = j < d ? XT + (index_t)j * n : sample_weight;
        float top = 0.0f;
        for (index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
             i += (index_t)gridDim.x * blockDim.x)
            top = fmaxf(top, fabsf(values[i]));
        for (int offset = 16; offset > 0; offset >>= 1)
            top = fmaxf(top, __shfl_down_sync(0xffffffffu, top, offset));
        if (threadIdx.x == 0) block_max = 0u;
        __syncthreads();
        if ((threadIdx.x & 31) == 0) atomicMax(&block_max, __float_as_uint(top));
        __syncthreads();
        if (threadIdx.x == 0 && block_max != 0u) atomicMax(&maxima[j], block_max);
        __syncthreads();
    }
}

// The quanta from fixed_maxima's values: s_j the largest integer with
// n * max|x_j| * max|w| * 2^s_j <= 2^62 (the weights': n * max|w| * 2^s_d <= 2^62);
// scales[j] = 2^s_j, unscales[j] = 2^-s_j. A thread per entry.
__global__ void fixed_quanta(const unsigned* __restrict__ maxima,  // IN  (d + 1) float bits
                             index_t n, int d,                     // IN
                             double* __restrict__ scales,          // OUT (d + 1)
                             double* __restrict__ unscales)        // OUT (d + 1)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j > d) return;
    const double weight = (double)__uint_as_float(maxima[d]);
    // the host reference's order of operations, so the same bits: (max|x| max|w|) n
    const double bound = (j < d ? (double)__uint_as_float(maxima[j]) * weight : weight)
                         * (double)n;
    int e = 0;
    frexp(bound, &e);  // bound < 2^e (e = 0 for a zero bound)
    scales[j] = ldexp(1.0, 62 - e);
    unscales[j] = ldexp(1.0, e - 62);
}

// update_fixed_shared's integers into the float64 sums and weights: value (k, d) element
// (c, j) times 2^-s_j, weight c times 2^-s_d. In place when `sums` is `fixed_sums` (each
// thread reads its slot before writing it). Clears *reset (null: none) for the next call.
__global__ void fixed_to_double(const unsigned long long* fixed_sums,     // IN  (k, d)
                                const unsigned long long* fixed_weights,  // IN  (k)
                                double* sums,                             // OUT (k, d)
                                double* weights,                          // OUT (k)
                                const double* __restrict__ unscales,      // IN (d + 1)
                                int k, int d,                             // IN
                                int* reset)                               // OUT (1) or null
{
    for (index_t t = (index_t)blockIdx.x * blockDim.x + threadIdx.x; t < (index_t)k * (d + 1);
         t += (index_t)gridDim.x * blockDim.x) {
        const bool is_sum = t < (index_t)k * d;
        const index_t w = t - (index_t)k * d;
        const long long value = (long long)(is_sum ? fixed_sums[t] : fixed_weights[w]);
        const double scaled = (double)value * unscales[is_sum ? (int)(t % d) : d];
        if (is_sum) sums[t] = scaled;
        else weights[w] = scaled;
    }
    if (reset != nullptr && blockIdx.x == 0 && threadIdx.x == 0) *reset = 0;
}

// The move list of an assignment that does not list its moves (fixed_moves' input): every
// row whose label differs from `previous` -- the labels the fixed-point sums were made from
// -- as (row, old label), and previous := labels. 12 bytes a row read or written, where a
// recomputation of the sums reads the row's d features. `count` zeroed by the caller.
__global__ void __launch_bounds__(256)
label_moves(const int* __restrict__ labels,   // IN  (n)
            int* __restrict__ previous,       // INOUT (n) the sums' labels, then `labels`
            index_t n,                        // IN
            unsigned* __restrict__ count,     // INOUT (1) rows moved, listed or not
            unsigned capacity,                // IN
            index_t* __restrict__ rows,       // OUT (capacity)
            int* __restrict__ from)           // OUT (capacity)
{
    for (index_t base = (index_t)blockIdx.x * blockDim.x; base < n;
         base += (index_t)gridDim.x * blockDim.x) {  // uniform across the warp
        const index_t i = base + threadIdx.x;
        const int label = i < n ? labels[i] : 0;
        const int before = i < n ? previous[i] : 0;
        const bool moved = i < n && label != before;
        if (moved) previous[i] = label;
        record_move(moved, i, before, count, capacity, rows, from);
    }
}

// update="atomic-fixed" following the assignment's moves (gpumine.kmeans.gpu's _TrackedFixed;
// the list from hamerly's bounds_scan or from label_moves): the fixed-point sums are kept
// from the last call, and each row whose label moved has its rounded x_j w taken from its
// old cluster and given to its new one -- the very integers update_fixed_shared adds (the
// same expressions), so the sums equal a recomputation bit for bit: integer addition modulo
// 2^64 in any order, and the true sums are below 2^63. A moved row costs 2 (d + 1) global
// atomics (a group of lanes a row, so a warp's land on contiguous sums); late in a fit a
// few percent of the rows move, where a recomputation reads every row. Where the call does
// not follow the moves (follows_moves), it zeroes the sums instead and update_fixed_shared
// recomputes them.
template <typename T>
__global__ void __launch_bounds__(256)
fixed_moves(const T* __restrict__ XT,                // IN  (d, n)
            const int* __restrict__ labels,          // IN  (n) the new labels
            const T* __restrict__ sample_weight,     // IN  (n)
            index_t n, int d, int k,                 // IN
            const double* __restrict__ scales,       // IN  (d + 1) 2^s_j, the weights' last
            const int* __restrict__ reset,           // IN  (1)
            const unsigned* __restrict__ moves_count,  // IN  (1)
            unsigned capacity,                       // IN
            const index_t* __restrict__ move_rows,   // IN  (capacity)
            const int* __restrict__ move_from,       // IN  (capacity) old labels, -1: none
            unsigned long long* __restrict__ sums,     // INOUT (k, d) fixed point
            unsigned long long* __restrict__ weights,  // INOUT (k) fixed point
            int group)                               // IN  lanes a move, a power of two <= 32
{
    const unsigned count = *moves_count;
    const index_t first = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    const index_t stride = (index_t)gridDim.x * blockDim.x;
    if (!follows_moves(reset, count, capacity)) {  // uniform: update_fixed_shared recomputes
        for (index_t t = first; t < (index_t)k * (d + 1); t += stride) {
            if (t < (index_t)k * d) sums[t] = 0ull;
            else weights[t - (index_t)k * d] = 0ull;
        }
        return;
    }
    // `group` lanes a move (a power of two <= 32), lane j taking features j, j + group, ...
    // and the weight as feature d: a warp's atomics on one cluster's row are contiguous.
    const int j0 = (int)(first % group);
    for (index_t m = first / group; m < (index_t)count; m += stride / group) {
        const index_t i = move_rows[m];
        const int from = move_from[m], to = labels[i];
        const double w = (double)sample_weight[i];
        for (int j = j0; j <= d; j += group) {
            const bool is_weight = j == d;
            // the very integers update_fixed_shared adds (the same expressions)
            const long long q = is_weight ? __double2ll_rn(w * scales[d])
                : __double2ll_rn((double)XT[(index_t)j * n + i] * w * scales[j]);
            unsigned long long* into = is_weight ? weights + to : sums + (index_t)to * d + j;
            atomicAdd(into, (unsigned long long)q);
            if (from >= 0) {
                unsigned long long* out = is_weight ? weights + from
                                                    : sums + (index_t)from * d + j;
                atomicAdd(out, (unsigned long long)(-q));
            }
        }
    }
}

// One block per cluster, for small problems: block c scans every label in a fixed order
// (thread t takes points t, t + BLOCK, ...; eight labels loaded before any is used) and
// keeps the weighted sums of the points labelled c in double registers (d <= DMAX), then
// adds the threads' sums in a fixed order (warp shuffles, then warp by warp). No atomics
// and no zeroing -- every cluster's d + 1 values are written -- and the sums are the same
// run to run. The labels are read k times (from L2), so this can pay only where n * k is
// small and k large enough to fill the GPU.
template <typename T, int BLOCK, int DMAX>
__global__ void __launch_bounds__(BLOCK)
update_gather(const T* __restrict__ XT,            // IN  (d, n)
              const int* __restrict__ labels,      // IN  (n)
              const T* __restrict__ sample_weight, // IN  (n)
              index_t n, int d,                    // IN  d <= DMAX
              double* __restrict__ sums,           // OUT (k, d)
              double* __restrict__ weights)        // OUT (k)
{
    constexpr int kWarps = BLOCK / 32, kBatch = 8;
    __shared__ double shared_sums[kWarps][DMAX + 1];
    const int c = blockIdx.x;
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
    double acc[DMAX + 1];  // the d sums, then the weight
#pragma unroll
    for (int j = 0; j <= DMAX; ++j) acc[j] = 0.0;
    for (index_t base = 0; base < n; base += (index_t)BLOCK * kBatch) {
        int label[kBatch];
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
            const index_t i = base + (index_t)b * BLOCK + threadIdx.x;
            label[b] = i < n ? labels[i] : -1;
        }
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
            if (label[b] == c) {
                const index_t i = base + (index_t)b * BLOCK + threadIdx.x;
                const double w = (double)sample_weight[i];
#pragma unroll
                for (int j = 0; j < DMAX; ++j)
                    if (j < d) acc[j] += (double)XT[(index_t)j * n + i] * w;
                acc[DMAX] += w;
            }
        }
    }
#pragma unroll
    for (int j = 0; j <= DMAX; ++j) {
        if (j < d || j == DMAX) {
            double v = acc[j];
            for (int offset = 16; offset > 0; offset >>= 1)
                v += __shfl_down_sync(0xffffffffu, v, offset);
            if (lane == 0) shared_sums[warp][j] = v;
        }
    }
    __syncthreads();
    for (int j = threadIdx.x; j < d; j += BLOCK) {
        double total = 0.0;
        for (int w = 0; w < kWarps; ++w) total += shared_sums[w][j];
        sums[(index_t)c * d + j] = total;
    }
    if (threadIdx.x == 0) {
        double total = 0.0;
        for (int w = 0; w < kWarps; ++w) total += shared_sums[w][DMAX];
        weights[c] = total;
    }
}

// ---------------------------------------------------------------------------------------
// Seed paper 004 §5.1, GM-CL: one thread per point, one spinlock per cluster, sums and
// weights in global memory; the critical section adds the point's d features one by one.
template <typename T>
__global__ void update_gm_cl(const T* __restrict__ XT,            // IN  (d, n)
                             const int* __restrict__ labels,      // IN  (n)
                             const T* __restrict__ sample_weight, // IN  (n)
                             index_t n, int d,                    // IN
                             volatile double* sums,               // INOUT (k, d)
                             volatile double* weights,            // INOUT (k)
                             int* locks)                          // INOUT (k), zeroed
{
    const index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int label = labels[i];
    const double w = sample_weight[i];
    with_lock(&locks[label], [&]() {
        for (int j = 0; j < d; ++j)
            sums[(index_t)label * d + j] += (double)XT[(index_t)j * n + i] * w;
        weights[label] += w;
    });
}

// Seed paper 004 §5.2, GM-DL: one thread per (point, feature), one spinlock per
// (cluster, feature); the thread of feature 0 also adds the point's weight.
// Threads are numbered t = j * n + i so a warp reads consecutive points of one feature.
template <typename T>
__global__ void update_gm_dl(const T* __restrict__ XT,            // IN  (d, n)
                             const int* __restrict__ labels,      // IN  (n)
                             const T* __restrict__ sample_weight, // IN  (n)
                             index_t n, int d,                    // IN
                             volatile double* sums,               // INOUT (k, d)
                             volatile double* weights,            // INOUT (k)
                             int* locks)                          // INOUT (k, d), zeroed
{
    const index_t t = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n * d) return;
    const int j = (int)(t / n);
    const index_t i = t - (index_t)j * n;
    const int label = labels[i];
    const double w = sample_weight[i];
    const index_t slot = (index_t)label * d + j;
    with_lock(&locks[slot], [&]() {
        sums[slot] += (double)XT[t] * w;
        if (j == 0) weights[label] += w;
    });
}

// SM-CL / SM-DL's merge (seed 004 §5.3): one thread of the block adds the chunk's used
// clusters to the global sums, each under its GM-CL lock (locks[cluster * lock_stride]).
__device__ __forceinline__ void merge_chunk(int c0, int cc, int d,
                                            const volatile double* s_sums,     // IN (cc, d)
                                            const volatile double* s_weights,  // IN (cc)
                                            const int* s_used,                 // IN (cc)
                                            volatile double* sums,             // INOUT (k, d)
                                            volatile double* weights,          // INOUT (k)
                                            int* locks,                        // INOUT
                                            int lock_stride)                   // IN
{
    if (threadIdx.x != 0) return;
    for (int c = 0; c < cc; ++c) {
        if (!s_used[c]) continue;
        const int cluster = c0 + c;
        with_lock(&locks[(index_t)cluster * lock_stride], [&]() {
            for (int j = 0; j < d; ++j) sums[(index_t)cluster * d + j] += s_sums[c * d + j];
            weights[cluster] += s_weights[c];
        });
    }
}

// Seed paper 004 §5.3, SM-CL: per block, clusters [c0, c0 + chunk) live in shared memory
// with one shared spinlock each; threads whose point falls in the chunk add it under the
// lock, the others wait for the next chunk. Then one thread of the block adds the block's
// non-empty clusters to global memory under GM-CL's global locks.
// Shared memory: chunk * (d + 1) doubles + 2 * chunk ints.
template <typename T>
__global__ void update_sm_cl(const T* __restrict__ XT,            // IN  (d, n)
                             const int* __restrict__ labels,      // IN  (n)
                             const T* __restrict__ sample_weight, // IN  (n)
                             index_t n, int d, int k, int chunk,  // IN
                             volatile double* sums,               // INOUT (k, d)
                             volatile double* weights,            // INOUT (k)
                             int* locks)                          // INOUT (k), zeroed
{
    extern __shared__ double shared_raw_cl[];
    volatile double* s_sums = shared_raw_cl;
    volatile double* s_weights = shared_raw_cl + (index_t)chunk * d;
    int* s_locks = reinterpret_cast<int*>(shared_raw_cl + (index_t)chunk * (d + 1));
    int* s_used = s_locks + chunk;
    const index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int label = i < n ? labels[i] : -1;
    const double w = i < n ? (double)sample_weight[i] : 0.0;
    for (int c0 = 0; c0 < k; c0 += chunk) {
        const int cc = min(chunk, k - c0);
        for (int t = threadIdx.x; t < cc * d; t += blockDim.x) s_sums[t] = 0.0;
        for (int t = threadIdx.x; t < cc; t += blockDim.x) {
            s_weights[t] = 0.0;
            s_locks[t] = s_used[t] = 0;
        }
        __syncthreads();
        if (label >= c0 && label < c0 + cc) {
            const int c = label - c0;
            s_used[c] = 1;
            with_shared_lock(&s_locks[c], [&]() {
                for (int j = 0; j < d; ++j) s_sums[c * d + j] += (double)XT[(index_t)j * n + i] * w;
                s_weights[c] += w;
            });
        }
        __syncthreads();
        merge_chunk(c0, cc, d, s_sums, s_weights, s_used, sums, weights, locks, 1);
        __syncthreads();
    }
}

// Seed paper 004 §5.4, SM-DL: SM-CL with one thread per (point, feature) and one shared
// lock per (cluster, feature). A block covers blockDim consecutive points of one feature
// (t = j * n + i), so the flush adds that block's touched (cluster, feature) entries.
// Shared memory: chunk * d doubles + chunk doubles + chunk * d ints + chunk ints.
template <typename T>
__global__ void update_sm_dl(const T* __restrict__ XT,            // IN  (d, n)
                             const int* __restrict__ labels,      // IN  (n)
                             const T* __restrict__ sample_weight, // IN  (n)
                             index_t n, int d, int k, int chunk,  // IN
                             volatile double* sums,               // INOUT (k, d)
                             volatile double* weights,            // INOUT (k)
                             int* locks)                          // INOUT (k, d), zeroed
{
    extern __shared__ double shared_raw_dl[];
    volatile double* s_sums = shared_raw_dl;
    volatile double* s_weights = shared_raw_dl + (index_t)chunk * d;
    int* s_locks = reinterpret_cast<int*>(shared_raw_dl + (index_t)chunk * (d + 1));
    int* s_used = s_locks + (index_t)chunk * d;
    const index_t t = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    const bool active = t < n * d;
    const int j = active ? (int)(t / n) : 0;
    const index_t i = active ? t - (index_t)j * n : 0;
    const int label = active ? labels[i] : -1;
    const double w = active ? (double)sample_weight[i] : 0.0;
    for (int c0 = 0; c0 < k; c0 += chunk) {
        const int cc = min(chunk, k - c0);
        for (int s = threadIdx.x; s < cc * d; s += blockDim.x) {
            s_sums[s] = 0.0;
            s_locks[s] = 0;
        }
        for (int s = threadIdx.x; s < cc; s += blockDim.x) {
            s_weights[s] = 0.0;
            s_used[s] = 0;
        }
        __syncthreads();
        if (label >= c0 && label < c0 + cc) {
            const int c = label - c0;
            s_used[c] = 1;
            with_shared_lock(&s_locks[c * d + j], [&]() {
                s_sums[c * d + j] += (double)XT[t] * w;
                if (j == 0) s_weights[c] += w;
            });
        }
        __syncthreads();
        merge_chunk(c0, cc, d, s_sums, s_weights, s_used, sums, weights, locks, d);
        __syncthreads();
    }
}

// ---------------------------------------------------------------------------------------
// Seed paper 004 §5.5, shared-nothing: a thread owns a cluster (CT) or a (cluster, feature)
// pair (DT) and scans every point, so no two threads write the same value.

// GM-CT: one thread per cluster, running sums in global memory.
template <typename T>
__global__ void update_gm_ct(const T* __restrict__ XT,            // IN  (d, n)
                             const int* __restrict__ labels,      // IN  (n)
                             const T* __restrict__ sample_weight, // IN  (n)
                             index_t n, int d, int k,             // IN
                             double* __restrict__ sums,           // OUT (k, d)
                             double* __restrict__ weights)        // OUT (k)
{
    const int cluster = blockIdx.x * blockDim.x + threadIdx.x;
    if (cluster >= k) return;
    for (index_t i = 0; i < n; ++i) {
        if (labels[i] != cluster) continue;
        const double w = sample_weight[i];
        for (int j = 0; j < d; ++j) sums[(index_t)cluster * d + j] += (double)XT[(index_t)j * n + i] * w;
        weights[cluster] += w;
    }
}

// GM-DT: one thread per (cluster, feature); the feature-0 thread also sums the weight.
template <typename T>
__global__ void update_gm_dt(const T* __restrict__ XT,            // IN  (d, n)
                             const int* __restrict__ labels,      // IN  (n)
                             const T* __restrict__ sample_weight, // IN  (n)
                             index_t n, int d, int k,             // IN
                             double* __restrict__ sums,           // OUT (k, d)
                             double* __restrict__ weights)        // OUT (k)
{
    const index_t slot = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (slot >= (index_t)k * d) return;
    const int cluster = (int)(slot / d), j = (int)(slot - (index_t)cluster * d);
    const T* column = XT + (index_t)j * n;
    for (index_t i = 0; i < n; ++i) {
        if (labels[i] != cluster) continue;
        const double w = sample_weight[i];
        sums[slot] += (double)column[i] * w;
        if (j == 0) weights[cluster] += w;
    }
}

// SM-CT: GM-CT with each thread's running sums in shared memory, dt features at a time
// (the points are scanned once per portion of features).
// Shared memory: blockDim * (dt + 1) doubles.
template <typename T>
__global__ void update_sm_ct(const T* __restrict__ XT,            // IN  (d, n)
                             const int* __restrict__ labels,      // IN  (n)
                             const T* __restrict__ sample_weight, // IN  (n)
                             index_t n, int d, int k, int dt,     // IN
                             double* __restrict__ sums,           // OUT (k, d)
                             double* __restrict__ weights)        // OUT (k)
{
    extern __shared__ double shared_ct[];
    double* mine = shared_ct + (index_t)threadIdx.x * (dt + 1);
    const int cluster = blockIdx.x * blockDim.x + threadIdx.x;
    if (cluster >= k) return;
    for (int j0 = 0; j0 < d; j0 += dt) {
        const int jc = min(dt, d - j0);
        for (int j = 0; j <= jc; ++j) mine[j] = 0.0;
        for (index_t i = 0; i < n; ++i) {
            if (labels[i] != cluster) continue;
            const double w = sample_weight[i];
            for (int j = 0; j < jc; ++j) mine[j] += (double)XT[(index_t)(j0 + j) * n + i] * w;
            mine[jc] += w;
        }
        for (int j = 0; j < jc; ++j) sums[(index_t)cluster * d + j0 + j] = mine[j];
        if (j0 == 0) weights[cluster] = mine[jc];
    }
}

// SM-DT: GM-DT with each thread's running sum and weight in shared memory.
// Shared memory: 2 * blockDim doubles.
template <typename T>
__global__ void update_sm_dt(const T* __restrict__ XT,            // IN  (d, n)
                             const int* __restrict__ labels,      // IN  (n)
                             const T* __restrict__ sample_weight, // IN  (n)
                             index_t n, int d, int k,             // IN
                             double* __restrict__ sums,           // OUT (k, d)
                             double* __restrict__ weights)        // OUT (k)
{
    extern __shared__ double shared_dt[];
    double* my_sum = shared_dt + threadIdx.x;
    double* my_weight = shared_dt + blockDim.x + threadIdx.x;
    const index_t slot = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (slot >= (index_t)k * d) return;
    const int cluster = (int)(slot / d), j = (int)(slot - (index_t)cluster * d);
    const T* column = XT + (index_t)j * n;
    *my_sum = 0.0;
    *my_weight = 0.0;
    for (index_t i = 0; i < n; ++i) {
        if (labels[i] != cluster) continue;
        const double w = sample_weight[i];
        *my_sum += (double)column[i] * w;
        *my_weight += w;
    }
    sums[slot] = *my_sum;
    if (j == 0) weights[cluster] = *my_weight;
}

// ---------------------------------------------------------------------------------------
// sort (flash-kmeans): points ordered by label (a stable radix sort done by the caller);
// one block per (cluster, feature or weight) reduces its segment in a fixed order, so the
// result is bit-identical run to run. Column j == d is the weight. GPUMINE_BLOCK threads.
template <typename T>
__global__ void __launch_bounds__(GPUMINE_BLOCK)
update_sorted_segments(const T* __restrict__ XT,            // IN (d, n)
                                       const T* __restrict__ sample_weight, // IN (n)
                                       const index_t* __restrict__ order,   // IN (n) by label
                                       const index_t* __restrict__ offsets, // IN (k + 1)
                                       index_t n, int d,                    // IN
                                       double* __restrict__ sums,           // OUT (k, d)
                                       double* __restrict__ weights)        // OUT (k)
{
    __shared__ double scratch[GPUMINE_BLOCK / kWarpSize];
    const int cluster = blockIdx.x, j = blockIdx.y;
    const index_t begin = offsets[cluster], end = offsets[cluster + 1];
    double acc = 0.0;
    for (index_t s = begin + threadIdx.x; s < end; s += GPUMINE_BLOCK) {
        const index_t i = order[s];
        const double w = sample_weight[i];
        acc += j < d ? (double)XT[(index_t)j * n + i] * w : w;
    }
    acc = block_all_reduce<GPUMINE_BLOCK>(acc, scratch, Add());
    if (threadIdx.x == 0) {
        if (j < d) sums[(index_t)cluster * d + j] = acc;
        else weights[cluster] = acc;
    }
}

// ---------------------------------------------------------------------------------------
// Seed paper 000 §6-7 (Listing 2), irregular reduction. Per work-group of G points:
// each work item takes id_within_cluster = atomic add(1, index[c]); the first item of each
// cluster takes the cluster's offset = atomic add(size, global_offset); index[offset + id]
// = work item, so each cluster's items are consecutive in index[]; then a log2 tree
// reduction per cluster reads values through index[]. The group writes the k * (d + 1)
// partial sums (feature sums, weight) of the clusters it holds (the caller zeroes the rest)
// and its count of points whose label changed; irregular_finish adds the groups.
// index[] has G entries, so a cluster is counted at the slot of its lowest work item in
// the group (k may exceed G). G is a power of two, LOG_G its log2.
template <typename T, int G, int LOG_G>
__global__ void irregular_partial(const T* __restrict__ XT,            // IN  (d, n)
                                  const int* __restrict__ labels,      // IN  (n)
                                  const int* __restrict__ labels_old,  // IN  (n), may be null
                                  const T* __restrict__ sample_weight, // IN  (n)
                                  index_t n, int d, int k,             // IN
                                  index_t group0,                      // IN  first group
                                  double* __restrict__ partial,        // OUT (groups, k, d+1)
                                  int* __restrict__ changed)           // OUT (groups)
{
    __shared__ int group_labels[G];
    __shared__ int index[G];
    __shared__ int offsets[G];
    __shared__ double values[G];
    __shared__ int global_offset;
    __shared__ int changed_count;
    const int tid = threadIdx.x;
    const index_t group = group0 + blockIdx.x;
    const index_t i = group * G + tid;
    const bool active = i < n;
    const int c = active ? labels[i] : -1;
    group_labels[tid] = c;
    index[tid] = 0;
    if (tid == 0) { global_offset = 0; changed_count = 0; }
    __syncthreads();
    int slot = tid;  // the cluster's counter: its lowest work item in this group
    for (int other = 0; active && other < tid; ++other)
        if (group_labels[other] == c) { slot = other; break; }
    const int id_within_cluster = active ? atomicAdd(&index[slot], 1) : 0;
    __syncthreads();
    const int reduce_array_size = active ? index[slot] : 0;
    if (active && id_within_cluster == 0) offsets[slot] = atomicAdd(&global_offset, reduce_array_size);
    if (active && labels_old != nullptr && labels_old[i] != c) atomicAdd(&changed_count, 1);
    __syncthreads();
    const int new_id = (active ? offsets[slot] : 0) + id_within_cluster;
    if (active) index[new_id] = tid;
    __syncthreads();
    const double w = active ? (double)sample_weight[i] : 0.0;
    for (int j = 0; j <= d; ++j) {
        values[tid] = active ? (j < d ? (double)XT[(index_t)j * n + i] * w : w) : 0.0;
        __syncthreads();
        int size = reduce_array_size;
        for (int step = 0; step < LOG_G; ++step) {  // uniform trip count for the barrier
            const int half = (size + 1) >> 1;
            if (active && id_within_cluster < (size >> 1))
                values[index[new_id]] += values[index[new_id + half]];
            size = half;
            __syncthreads();
        }
        if (active && id_within_cluster == 0)
            partial[((index_t)blockIdx.x * k + c) * (d + 1) + j] = values[tid];
        __syncthreads();
    }
    if (tid == 0) changed[blockIdx.x] = changed_count;
}

// Adds the groups' partial sums: one block per cluster, GPUMINE_BLOCK threads striding over
// groups, then block_all_reduce. Column d of each partial is the weight.
__global__ void __launch_bounds__(GPUMINE_BLOCK)
irregular_finish(const double* __restrict__ partial,  // IN  (groups, k, d+1)
                                 index_t groups, int d, int k,        // IN
                                 double* __restrict__ sums,           // INOUT (k, d)
                                 double* __restrict__ weights)        // INOUT (k)
{
    __shared__ double scratch[GPUMINE_BLOCK / kWarpSize];
    const int cluster = blockIdx.x;
    for (int j = 0; j <= d; ++j) {
        double value = 0.0;
        for (index_t g = threadIdx.x; g < groups; g += GPUMINE_BLOCK)
            value += partial[(g * k + cluster) * (d + 1) + j];
        value = block_all_reduce<GPUMINE_BLOCK>(value, scratch, Add());
        if (threadIdx.x == 0) {
            if (j < d) sums[(index_t)cluster * d + j] += value;
            else weights[cluster] += value;
        }
    }
}

// ---------------------------------------------------------------------------------------
// Seed paper 002 appendix, masked tree: kernel `cluster` writes, per block and cluster, the
// block's masked tree reduction (each thread contributes its point if it belongs to the
// cluster, else 0); kernel `summation` halves the number of per-block partials per pass
// (2 * blockDim partials per block) until one remains. Layout: partial[(c * len + b) *
// (d + 1) + j], column d the weight.
template <typename T>
__global__ void masked_tree_cluster(const T* __restrict__ XT,            // IN  (d, n)
                                    const int* __restrict__ labels,      // IN  (n)
                                    const T* __restrict__ sample_weight, // IN  (n)
                                    index_t n, int d, int k,             // IN
                                    double* __restrict__ partial)        // OUT (k, blocks, d+1)
{
    __shared__ double tree[256];
    const index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int label = i < n ? labels[i] : -1;
    const double w = i < n ? (double)sample_weight[i] : 0.0;
    for (int c = 0; c < k; ++c) {
        for (int j = 0; j <= d; ++j) {
            tree[threadIdx.x] = label == c ? (j < d ? (double)XT[(index_t)j * n + i] * w : w) : 0.0;
            __syncthreads();
            for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
                if (threadIdx.x < stride) tree[threadIdx.x] += tree[threadIdx.x + stride];
                __syncthreads();
            }
            if (threadIdx.x == 0)
                partial[((index_t)c * gridDim.x + blockIdx.x) * (d + 1) + j] = tree[0];
            __syncthreads();
        }
    }
}

__global__ void masked_tree_summation(const double* __restrict__ partial,  // IN  (k, len, d+1)
                                      index_t len, int d, int k,            // IN
                                      double* __restrict__ partial_out)     // OUT (k, out, d+1)
{
    __shared__ double tree[512];
    const index_t out_len = gridDim.x;
    for (int c = 0; c < k; ++c) {
        for (int j = 0; j <= d; ++j) {
            const index_t b0 = (index_t)blockIdx.x * 2 * blockDim.x + threadIdx.x;
            const index_t b1 = b0 + blockDim.x;
            tree[threadIdx.x] = b0 < len ? partial[((index_t)c * len + b0) * (d + 1) + j] : 0.0;
            tree[threadIdx.x + blockDim.x] =
                b1 < len ? partial[((index_t)c * len + b1) * (d + 1) + j] : 0.0;
            __syncthreads();
            for (int stride = blockDim.x; stride > 0; stride >>= 1) {
                if (threadIdx.x < stride) tree[threadIdx.x] += tree[threadIdx.x + stride];
                __syncthreads();
            }
            if (threadIdx.x == 0)
                partial_out[((index_t)c * out_len + blockIdx.x) * (d + 1) + j] = tree[0];
            __syncthreads();
        }
    }
}
