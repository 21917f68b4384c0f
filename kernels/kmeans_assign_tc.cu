// Exact k-means assignment on tensor cores (assign="tc-exact"). X is column-major: feature j
// of point i at XT[j * n + i]. The derivation of the error bound is in
// gpumine/kmeans/tensor_cores.py; the constants arrive as the `bound` argument:
//   bound[0] kappa_g: |computed score - (||c||^2 - 2 x.c)| <= kappa_g * (2 |x| cmax + cmax^2)
//   bound[1] kappa_d: |direct distance in T - true distance| <= kappa_d * true distance
//   bound[2] absolute: |score error| from underflow <= bound[2] * (1 + |x| + cmax)
//   bound[3] 1 for assign="tc-fast": every row is decided (FP16 labels, no re-check)
//   bound[4] kappa_s: |distance error| from shifting to float32 <= kappa_s (|x| + cmax)^2
// (assign_tc_half takes ten: its split kernel's five, then the one-product kernel's, whose
// accumulation over every feature has the wider kappa_g.)
// Points and centres are shifted by the centres' mean (`shift`) and rounded to float32
// before the products; |x| and cmax are norms of the shifted values.
// A row whose top-2 margin does not exceed the bound goes to a list; assign_recheck then
// assigns it with the direct sum (x - c)^2 in T, exactly as assign_tiled does.
#include "common.cuh"
#include "kmeans_direct.cuh"

// Running best and second-best score of a row, and the index of the best.
struct Top2 {
    float best, second;
    int index;
};

__device__ __forceinline__ void top2_init(Top2& t) {
    t.best = max_value<float>();
    t.second = max_value<float>();
    t.index = 0;
}

// Visit scores in increasing centre index: strict < keeps the lowest index on ties.
__device__ __forceinline__ void top2_push(Top2& t, float score, int index) {
    t.second = fminf(t.second, fmaxf(t.best, score));
    if (score < t.best) {
        t.best = score;
        t.index = index;
    }
}

// The one-product kernel's top-2 (the screen's and tc-fast's) on keys: the score with its
// low `mask` bits replaced by a lane-local centre number q, so that a score costs one logic
// and three min/max instructions instead of five: the compare and two selects that carry
// the index are gone (the index comes back from the best key's low bits). A key moves a
// normal score by less than 2^(bits - 23) |score|; the kernels run with subnormals flushed
// (the min/max too), so a key below 2^-126 in magnitude moves by less than 2^-126 and loses
// q: key_error bounds both, which the screen's margin adds (`dropped`), and a row whose
// best key is that small is never decided (its index is unknown). Padded centres' scores
// are the largest float (tc_prepare_centers), whose keys stay finite: a NaN key would pass
// fmaxf and set the second to the best.
// The min/max and the logic run on the ALU pipe, at half the FMA pipe's rate (four ALU
// instructions a score here), so max(best, key) is taken as (best + key) - min(best, key):
// two additions on the FMA pipe for one ALU instruction (10M x 32, k = 1024 on the H200:
// the screen 5.03 -> 4.94 ms, tc-fast 2-3 % faster, 64 and 128 features level; record
// tc-source-ab-fadd-max-2026-11-28-e3039d1.json; the pipes under ncu afterwards:
// ncu-tc-fast-d32-h200-2026-11-28-e3039d1.txt). Its two roundings put it within 3 * 2^-24 max(|best|, |key|)
// of the max (and within 2^-125 where flushed to zero), which key_error adds; a sum that
// overflows reads +inf and leaves the second as it was, which key_error rules out for a
// decided row by its score bound (every real score below 2^124 in magnitude) -- only the
// padded centres' largest-float keys and the initial best can overflow it, and those are
// never a decided row's second (a second centre's real score is below them).
__device__ __forceinline__ void top2_push_key(Top2& t, float score, int q, int mask) {
    const float key = __int_as_float((__float_as_int(score) & ~mask) | q);
    const float best = fminf(t.best, key);
    t.second = fminf(t.second, __fsub_rn(__fadd_rn(t.best, key), best));
    t.best = best;
}

// Keys up to this many bits: k_pad <= GPUMINE_TC_KEY_CENTRES (common.cuh); more centres
// take the five-instruction top-2 (the launcher's choice: KEYS of assign_tc_half).
constexpr int KEY_BITS = 12;
static_assert(GPUMINE_TC_KEY_CENTRES == 4 << KEY_BITS, "q < k_pad / 4 in KEY_BITS bits");

// The most a key moves a score of a row, from the row's score error e (top2_error) and the
// largest score magnitude S = cmax^2 + 2 |x| cmax + e, with a margin for this double
// arithmetic: the key's own move (2^(bits - 23) S, 2^-126 below float's normal range) and
// the second's additions (top2_push_key: 3 * 2^-24 of a key's magnitude, which exceeds S
// by at most 2^-11 of it, and 2^-125 flushed). Infinite (never decided) where S reaches
// 2^124, where those additions could overflow.
__device__ __forceinline__ double key_error(int bits, double x_norm2, double cmax, double e) {
    const double S = cmax * cmax + 2.0 * sqrt(x_norm2) * cmax + e;
    if (!(S < 0x1p124)) return __longlong_as_double(0x7ff0000000000000ll);  // +inf
    return (ldexp(S, bits - 23) + ldexp(S, -22) + 0x1p-124) * (1.0 + 0x1p-20);
}

// Merge with the state held by lane (lane ^ mask): the best by (score, index), the second
// is the smallest of the remaining three.
__device__ __forceinline__ void top2_merge_lanes(Top2& t, int mask) {
    const float best = __shfl_xor_sync(0xffffffffu, t.best, mask);
    const float second = __shfl_xor_sync(0xffffffffu, t.second, mask);
    const int index = __shfl_xor_sync(0xffffffffu, t.index, mask);
    if (best < t.best || (best == t.best && index < t.index)) {
        t.second = fminf(t.best, second);
        t.best = best;
        t.index = index;
    } else {
        t.second = fminf(t.second, best);
    }
}

// The score error e of a row: |x|^2 + s_j is within e of the true squared distance D_j to
// every centre j (the docstring of gpumine.kmeans.tensor_cores, "The bound").
__device__ __forceinline__ double top2_error(double x_norm2, double cmax, const double* bound,
                                             double extra) {
    const double x_norm = sqrt(x_norm2);
    return bound[0] * (2.0 * x_norm * cmax + cmax * cmax) + bound[2] * (1.0 + x_norm + cmax)
           + bound[4] * (x_norm + cmax) * (x_norm + cmax) + extra;
}

// True when the computed top-2 decides the exact label: the margin exceeds twice the score
// error plus the direct computation's own error on the two distances (the docstring of
// gpumine.kmeans.tensor_cores derives it). `extra`: a further score error (the screen's
// dropped lo parts; 0 for the split products). NaN margins are never decided.
__device__ __forceinline__ bool top2_decides(const Top2& t, double x_norm2, double cmax,
                                             const double* bound, double extra = 0.0) {
    if (bound[3] != 0.0) return true;
    const double e_score = top2_error(x_norm2, cmax, bound, extra);
    const double margin = (double)t.second - (double)t.best;
    const double distances = fabs(2.0 * x_norm2 + (double)t.best + (double)t.second)
                             + 2.0 * e_score;
    return margin > 2.0 * e_score + bound[1] * distances;
}

// Write a decided label (counted as store_label counts, against `previous`, the row's label
// before this call) or queue the row with its best centre by the scores (the re-check's
// first candidate). Every lane of the warp must call it. Returns the row's slot in the queue,
// or 0xffffffff where it was not queued.
__device__ __forceinline__ unsigned finish_row(int* labels, index_t i, bool active, bool decided,
                                               int label, int previous,
                                               unsigned long long* changed,
                                               unsigned* queue_size, index_t* queue,
                                               int* queue_best) {
    bool moved = false;
    unsigned slot = 0xffffffffu;
    if (active && decided) {
        moved = write_label(labels, i, true, label, previous);
    } else if (active) {
        slot = atomicAdd(queue_size, 1u);
        queue[slot] = i;
        queue_best[slot] = label;
    }
    count_moved(moved, changed);
    return slot;
}

// Hamerly's bounds (kmeans_bounds.cu) of row i from its top-2 scores, so that a bounds
// assignment can go on from this call without a full scan: for a decided row (label
// t.index) D_label <= |x|^2 + s_1 + e and D_j >= |x|^2 + s_2 - e for every other j
// (top2_error), |x|^2 summed in float64 from float values (relative error below 2^-40 of
// it, added). A row not decided here (queued for the re-check) keeps the bounds it had,
// which hold for any label the re-check gives it: +inf and 0 where a seed starts
// (BoundAssign.seeded fills them), or those bounds_filter wrote for its scan.
__device__ __forceinline__ void seed_bounds(float* upper, float* lower, index_t i,
                                            bool decided, const Top2& t, double x_norm2,
                                            double cmax, const double* bound, double extra) {
    if (!decided) return;
    const double e = top2_error(x_norm2, cmax, bound, extra) + x_norm2 * 0x1p-40;
    upper[i] = bound_up(sqrt(fmax(x_norm2 + (double)t.best + e, 0.0)));
    lower[i] = bound_down(sqrt(fmax(x_norm2 + (double)t.second - e, 0.0)));
}

// Centres shifted by `shift` and rounded to float32 in a (k_pad, dp) buffer zero-padded
// past d and k; their squared norms (float64 sum of the float32 values, rounded to float;
// +inf for padding so a padded centre never wins); the largest norm, rounded up, by an
// atomicMax on its bits (non-negative floats order as their bits). One block per padded
// centre.
template <typename T>
__global__ void tc_prepare_centers(const T* __restrict__ centers,   // IN  (k, d)
                                   const double* __restrict__ shift, // IN  (d)
                                   int k,                           // IN
                                   int d,                           // IN  d <= dp
                                   int dp,                          // IN  padded width
                                   float* __restrict__ padded,      // OUT (k_pad, dp)
                                   float* __restrict__ norms,       // OUT (k_pad)
                                   unsigned* __restrict__ cmax)     // INOUT (1) float bits,
                                                                    //       zeroed before
{
    __shared__ double partial[32];
    const int c = blockIdx.x;
    double sum = 0.0;
    for (int j = threadIdx.x; j < dp; j += blockDim.x) {
        float value = 0.0f;
        if (c < k && j < d) {
            value = (float)((double)centers[(index_t)c * d + j] - shift[j]);
        }
        padded[(index_t)c * dp + j] = value;
        sum += (double)value * (double)value;
    }
    for (int offset = 16; offset > 0; offset >>= 1)
        sum += __shfl_down_sync(0xffffffffu, sum, offset);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        double total = 0.0;
        for (int w = 0; w < (int)(blockDim.x >> 5); ++w) total += partial[w];
        if (c < k) {
            norms[c] = (float)total;
            atomicMax(cmax, __float_as_uint(__double2float_ru(sqrt(total))));
        } else {
            // the largest float, not +inf: a padded centre's score is then that (its
            // products are zero), never a best, and its key (top2_push_key) stays finite
            norms[c] = max_value<float>();
        }
    }
}

// The centres' mean in float64, the shift of tc_prepare_centers: a block of 32 x Y threads
// (Y = blockDim.y, at most 32) per 32 features, thread (x, y) adding centres y, y + Y, ...
// of feature x in float64, the Y partial sums then added in order (the same bits every call
// for a given Y). One launch where cupy.mean along axis 0 took 27 us at k = 1024, d = 128
// (tc-screen-breakdown-h100-*); Y = 32 where 8 left each thread a chain of k / 8 dependent
// additions: 25 -> 12 us at k = 1024 on the H200 (gpumine.kmeans.tensor_cores._MEAN_ROWS,
// record tc-center-mean-h200-2026-11-28-f619ffb.json).
template <typename T>
__global__ void __launch_bounds__(1024)
tc_center_mean(const T* __restrict__ centers,  // IN  (k, d)
               int k, int d,                   // IN
               double* __restrict__ shift)     // OUT (d)
{
    __shared__ double partial[32][33];
    const int j = blockIdx.x * 32 + threadIdx.x;
    double sum = 0.0;
    if (j < d)
        for (int c = threadIdx.y; c < k; c += blockDim.y)
            sum += (double)centers[(index_t)c * d + j];
    partial[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && j < d) {
        double total = 0.0;
        for (int y = 0; y < (int)blockDim.y; ++y) total += partial[y][threadIdx.x];
        shift[j] = total / (double)k;
    }
}

// The first `cap` queued rows copied into a compact column-major buffer (d, cap), so the
// re-check reads them coalesced: scattered rows cost a sector per feature, read once here
// instead of once per centre tile. Fixed grid striding over min(*queue_size, cap) * d.
template <typename T>
__global__ void gather_queued(const T* __restrict__ XT,                 // IN  (d, n)
                              index_t n,                                // IN
                              int d,                                    // IN
                              const unsigned* __restrict__ queue_size,  // IN  (1)
                              const index_t* __restrict__ queue,        // IN  queued rows
                              index_t cap,                              // IN  compact rows
                              T* __restrict__ compact)                  // OUT (d, cap)
{
    const index_t rows = min((index_t)*queue_size, cap);
    for (index_t t = (index_t)blockIdx.x * blockDim.x + threadIdx.x; t < rows * d;
         t += (index_t)gridDim.x * blockDim.x) {
        const index_t j = t / rows, q = t - j * rows;  // a warp reads consecutive queue slots
        compact[j * cap + q] = XT[j * n + queue[q]];
    }
}

// The first `cap` queued rows (the compact copy gather_queued made), each against a range
// of `chunk` centres: blockIdx.y picks the range, a thread a row, tiled_argmin_range's loop
// (assign_tiled's arithmetic, so the same distances). A few thousand queued rows times all
// k centres kept a block per SM busy; split over the centres they fill the device. Each
// (range, row) writes its best distance and index; recheck_merge picks the label. The grid
// is fixed and strides over min(*queue_size, cap) in chunks of a block (uniform across it).
// Shared memory: KT * dt * sizeof(T) bytes (dynamic).
template <typename T, int KT>
__global__ void assign_recheck_split(const T* __restrict__ compact,            // IN  (d, cap)
                                     index_t cap,                              // IN
                                     const T* __restrict__ centers,            // IN  (k, d)
                                     int d, int k, int dt, int chunk,          // IN
                                     const unsigned* __restrict__ queue_size,  // IN  (1)
                                     T* __restrict__ best,                     // OUT (ranges, cap)
                                     int* __restrict__ best_index)             // OUT (ranges, cap)
{
    extern __shared__ __align__(16) unsigned char shared_raw[];
    const index_t size = min((index_t)*queue_size, cap);
    const int k_begin = blockIdx.y * chunk, k_end = min(k, k_begin + chunk);
    for (index_t base = (index_t)blockIdx.x * blockDim.x; base < size;
         base += (index_t)gridDim.x * blockDim.x) {  // uniform across the block
        const index_t q = base + threadIdx.x;
        const bool active = q < size;
        T value;
        const int index = tiled_argmin_range<T, KT>(compact, centers, cap, d, k_begin, k_end,
                                                    dt, active ? q : 0, active,
                                                    reinterpret_cast<T*>(shared_raw), value);
        if (active) {
            best[(index_t)blockIdx.y * cap + q] = value;
            best_index[(index_t)blockIdx.y * cap + q] = index;
        }
    }
}

// The label of each of the first `cap` queued rows from assign_recheck_split's ranges, in
// increasing order, an earlier range kept on equal distances: the lowest index of the
// smallest distance, as tiled_argmin (index 0 where no distance is below max_value<T>()).
template <typename T>
__global__ void recheck_merge(index_t cap, int ranges,                     // IN
                              const unsigned* __restrict__ queue_size,     // IN  (1)
                              const index_t* __restrict__ queue,           // IN  queued rows
                              const T* __restrict__ best,                  // IN  (ranges, cap)
                              const int* __restrict__ best_index,          // IN  (ranges, cap)
                              int* __restrict__ labels,                    // INOUT (n)
                              unsigned long long* changed)                 // INOUT (1) or null
{
    const index_t size = min((index_t)*queue_size, cap);
    for (index_t base = (index_t)blockIdx.x * blockDim.x; base < size;
         base += (index_t)gridDim.x * blockDim.x) {  // uniform across the block
        const index_t q = base + threadIdx.x;
        const bool active = q < size;
        int label = 0;
        if (active) {
            T value = best[q];
            label = best_index[q];
            for (int r = 1; r < ranges; ++r) {
                const T other = best[(index_t)r * cap + q];
                if (other < value) {
                    value = other;
                    label = best_index[(index_t)r * cap + q];
                }
            }
        }
        store_label(labels, active ? queue[q] : 0, active, label, changed);
    }
}

// The queued rows from slot `from` on (past the compact copy), a thread each, assigned by
// tiled_argmin from the scattered rows of XT: assign_tiled's loop, so the same values and
// the same label. The grid is fixed and strides over *queue_size in chunks of a block
// (uniform across it), so the launch needs no host read of the count.
// Shared memory: KT * dt * sizeof(T) bytes (dynamic).
template <typename T, int KT>
__global__ void assign_recheck(const T* __restrict__ XT,                 // IN  (d, n) points
                               const T* __restrict__ centers,            // IN  (k, d)
                               index_t n,                                // IN
                               int d,                                    // IN
                               int k,                                    // IN
                               int dt,                                   // IN  features per
                                                                         //     portion
                               index_t from,                             // IN  first slot
                               const unsigned* __restrict__ queue_size,  // IN  (1)
                               const index_t* __restrict__ queue,        // IN  queued rows
                               int* __restrict__ labels,                 // INOUT (n)
                               unsigned long long* changed)              // INOUT (1) or null
{
    extern __shared__ __align__(16) unsigned char shared_raw[];
    const index_t size = *queue_size;
    for (index_t base = from + (index_t)blockIdx.x * blockDim.x; base < size;
         base += (index_t)gridDim.x * blockDim.x) {  // uniform across the block
        const index_t q = base + threadIdx.x;
        const bool active = q < size;
        const index_t i = active ? queue[q] : 0;
        const int best_index = tiled_argmin<T, KT>(XT, centers, n, d, k, dt, i, active,
                                                   reinterpret_cast<T*>(shared_raw));
        store_label(labels, i, active, best_index, changed);
    }
}

// centre_gaps' arithmetic: float for float centres (a relative error of each term, so the
// same kind of bound at twice the rate), double for double ones.
template <typename T> struct GapArithmetic { using type = double; };
template <> struct GapArithmetic<float> { using type = float; };

// Lower bounds on the distances between centres, gaps[b * k + j] <= ||c_b - c_j||
// (rounded down to float), for recheck_pruned. The sum of squared differences in the
// centres' precision A (unit roundoff u; each difference and square rounded at most once,
// the sum d times: relative error below (d + 3) u), lowered by (2d + 16) u of itself and by
// an absolute 2^-100 (underflow), its square root by 2^-20 (float) or 2^-50 (double), then
// rounded down to float. A sum that overflows stands for a gap of at least 0.99 *
// sqrt(FLT_MAX) (float) or FLT_MAX (double: at least sqrt(DBL_MAX) apart, above any float);
// a NaN gives 0 (never pruned). (Gaps are floats: rows whose distance bound is beyond
// FLT_MAX / 2 prune nothing.) A block of 16 x 16 threads takes 64 x 64
// pairs, 4 x 4 a thread (rows ty + 16 r, columns tx + 16 c), the features through shared
// memory 16 at a time. Nothing is computed when fewer than min_rows rows are queued
// (recheck_pruned then passes them all on).
// (Launch bounds (256) alone: spills for double.)
template <typename T>
__global__ void __launch_bounds__(256, 2)
centre_gaps(const T* __restrict__ centers,            // IN  (k, d)
            int k,                                    // IN
            int d,                                    // IN
            const unsigned* __restrict__ queue_size,  // IN  (1)
            unsigned min_rows,                        // IN
            float* __restrict__ gaps)                 // OUT (k, k)
{
    if (*queue_size < min_rows) return;  // uniform across the grid
    using A = typename GapArithmetic<T>::type;
    constexpr int TILE = 64, F = 16;
    constexpr double U = sizeof(A) == 4 ? 0x1p-24 : 0x1p-53;
    __shared__ A rows[F][TILE + 1], cols[F][TILE + 1];
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int b0 = blockIdx.y * TILE, j0 = blockIdx.x * TILE;
    A sum[4][4] = {};
    for (int f0 = 0; f0 < d; f0 += F) {
        __syncthreads();
        for (int t = threadIdx.x; t < TILE * F; t += 256) {
            const int r = t / F, f = t - r * F;
            const bool inside = f0 + f < d;
            rows[f][r] = (b0 + r < k && inside) ? (A)centers[(index_t)(b0 + r) * d + f0 + f] : A(0);
            cols[f][r] = (j0 + r < k && inside) ? (A)centers[(index_t)(j0 + r) * d + f0 + f] : A(0);
        }
        __syncthreads();
#pragma unroll 4
        for (int f = 0; f < F; ++f) {
            A a[4], c[4];
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                a[r] = rows[f][ty + 16 * r];
                c[r] = cols[f][tx + 16 * r];
            }
#pragma unroll
            for (int r = 0; r < 4; ++r)
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    const A diff = a[r] - c[q];
                    sum[r][q] = fma(diff, diff, sum[r][q]);
                }
        }
    }
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int b = b0 + ty + 16 * r, j = j0 + tx + 16 * q;
            if (b < k && j < k) {
                const double total = (double)sum[r][q];
                float gap = 0.0f;  // a NaN: never pruned
                if (total > (double)max_value<A>()) {  // overflowed: at least sqrt(max) apart
                    gap = sizeof(A) == 4 ? 0.99f * 1.8446743e19f : 3.402823466e+38f;
                } else if (total >= 0.0) {
                    const double low = fmax(0.0, total * (1.0 - (2.0 * d + 16.0) * U) - 0x1p-100);
                    gap = __double2float_rd(sqrt(low) * (1.0 - (sizeof(A) == 4 ? 0x1p-20 : 0x1p-50)));
                }
                gaps[(index_t)b * k + j] = gap;
            }
        }
}

// Squared distance of the warp's row x (shared memory) to one centre row in float64, the
// features spread over the lanes (coalesced reads of the centre), every lane gets the sum.
// Each difference and square is rounded at most once and the sum d + 5 times, all terms
// positive: relative error below (d + 16) 2^-52 (recheck_pruned's eps), with an absolute
// part from float64's underflow far below its `absolute`. Every lane gets lane 0's sum, so
// the warp's decisions on it agree.
template <typename T>
__device__ __forceinline__ double warp_distance64(const T* x, const T* __restrict__ center,
                                                  int d, int lane) {
    double sum = 0.0;
    for (int j = lane; j < d; j += 32) {
        const double diff = (double)x[j] - (double)center[j];
        sum = fma(diff, diff, sum);
    }
#pragma unroll
    for (int mask = 16; mask > 0; mask >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, mask);
    return __shfl_sync(0xffffffffu, sum, 0);  // lane 0's: the lanes' orders of addition differ
}

// The queued rows' labels from few candidates (a warp a row, a fixed grid striding over
// *queue_size). Write D_j for a row's exact squared distance to centre j, Dh_j for the
// value assign_tiled computes (row_distance: |Dh_j - D_j| <= kappa_d D_j + a, a =
// `absolute`, as top2_decides's bound[1] and bound[2]) and b for the row's best centre by
// the scores (queue_best). With D_b from above by float64 (warp_distance64) and
//     R^2 = ((1 + kappa_d) D_b + 2a) / (1 - kappa_d) >= D_b,
// every centre j with gap(b, j) > 2R (centre_gaps) has ||x - c_j|| >= gap - ||x - c_b||
// > R, so (1 - kappa_d) D_j - a > (1 + kappa_d) D_b + a: Dh_j > Dh_b, it cannot be the
// label. The others (candidates, b among them) get D_j in float64; one whose lower bound
// on Dh_j exceeds the least upper bound among them cannot be the label either, and the
// rest (survivors: mostly one) get Dh_j by row_distance, the label the lowest index of
// the smallest below max_value<T>(), as tiled_argmin over every centre. Rows with more
// than MAXC candidates, or D_b not below a quarter of max_value<T>() (no overflow to
// model), go on to `rest` for the full re-check; so do all of them, copied in order, when
// fewer than min_rows are queued (centre_gaps left the gaps unwritten).
// The gaps come as select_gap_rows leaves them: each centre's `width` nearest, ascending,
// with the centres in `order`; the scan stops at the first gap beyond 2R, so a row's
// candidates are a prefix read in a sector or two (not a row of k gaps), and a row whose
// scan runs past MAXC of them goes on (width > MAXC unless it holds every centre). A warp loads
// rows_per_warp consecutive queued rows together (lane -> row lane % rows_per_warp, features
// lane / rows_per_warp + 32 / rows_per_warp * t): queued rows lie close together, so a load
// instruction takes fewer sectors of the column-major points than a row at a time (one
// sector a feature); it then decides them one after the other.
// Shared memory (dynamic): per warp, rows_per_warp rows (d values of T each, 16-byte
// aligned, 32 bytes apart so that the loads' stores spread over the banks), then MAXC
// doubles and MAXC ints.
// (Launch bounds (256) alone: 32 registers and spills.)
template <typename T, int MAXC>
__global__ void __launch_bounds__(256, 4)
recheck_pruned(const T* __restrict__ XT,                 // IN  (d, n) points
               index_t n,                                // IN
               int d,                                    // IN
               const T* __restrict__ centers,            // IN  (k, d)
               int k,                                    // IN
               const float* __restrict__ gaps,           // IN  (k, width) select_gap_rows' gaps
               const int* __restrict__ order,            // IN  (k, width) their centres
               int width,                                // IN  min(k, 256): > MAXC, or every centre
               int rows_per_warp,                        // IN  1, 2 or 4: rows a warp loads at once
               double kappa_d,                           // IN  relative error of a distance
               double absolute,                          // IN  its absolute error
               const unsigned* __restrict__ queue_size,  // IN  (1)
               const index_t* __restrict__ queue,        // IN  queued rows
               const int* __restrict__ queue_best,       // IN  their best centre by score
               unsigned min_rows,                        // IN  fewer queued: all passed on
               int* __restrict__ labels,                 // INOUT (n)
               unsigned long long* changed,              // INOUT (1) or null
               unsigned* __restrict__ rest_size,         // INOUT (1) zero in, rows passed on
               index_t* __restrict__ rest)               // OUT rows passed on
{
    const unsigned queued = *queue_size;
    if (queued < min_rows) {  // uniform across the grid
        for (index_t q = (index_t)blockIdx.x * blockDim.x + threadIdx.x; q < queued;
             q += (index_t)gridDim.x * blockDim.x)
            rest[q] = queue[q];
        if (blockIdx.x == 0 && threadIdx.x == 0) *rest_size = queued;
        return;
    }
    extern __shared__ __align__(16) unsigned char shared_raw[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int warps = blockDim.x >> 5;
    const int stride = (int)((d * sizeof(T) + 15) / 16 * 16) + 32;
    const int rows = rows_per_warp;
    unsigned char* rows_raw = shared_raw + (size_t)warp * rows * stride;
    unsigned char* lists_raw = shared_raw + (size_t)warps * rows * stride;
    double* dist = reinterpret_cast<double*>(lists_raw) + warp * MAXC;
    int* list = reinterpret_cast<int*>(reinterpret_cast<double*>(lists_raw) + warps * MAXC)
                + warp * MAXC;
    const double eps = (d + 16.0) * 0x1p-52;
    const double limit = 0.25 * (double)max_value<T>();
    const index_t size = queued;
    for (index_t q0 = ((index_t)blockIdx.x * warps + warp) * rows; q0 < size;
         q0 += (index_t)gridDim.x * warps * rows) {  // uniform across the warp
        if (q0 + lane % rows < size) {
            const index_t row = queue[q0 + lane % rows];
            T* to = reinterpret_cast<T*>(rows_raw + (size_t)(lane % rows) * stride);
            for (int f = lane / rows; f < d; f += 32 / rows) to[f] = XT[(index_t)f * n + row];
        }
        __syncwarp();
        for (int r = 0; r < rows && q0 + r < size; ++r) {  // uniform across the warp
            const T* x = reinterpret_cast<const T*>(rows_raw + (size_t)r * stride);
            const index_t q = q0 + r;
            const index_t i = queue[q];
            const int b = min(max(queue_best[q], 0), k - 1);  // a centre, whatever was queued
            const double own = warp_distance64(x, centers + (index_t)b * d, d, lane) * (1.0 + eps);
            bool decided = own < limit;  // false on NaN
            int count = 0;
            if (decided) {
                const double radius = sqrt(((1.0 + kappa_d) * own + 2.0 * absolute)
                                           / (1.0 - kappa_d)) * (1.0 + 0x1p-40);
                const double reach = 2.0 * radius * (1.0 + 0x1p-40);
                for (int j0 = 0; j0 < width && count <= MAXC; j0 += 32) {
                    const int j = j0 + lane;
                    const bool candidate = j < width
                        && !((double)gaps[(index_t)b * width + j] > reach);
                    const unsigned ballot = __ballot_sync(0xffffffffu, candidate);
                    const int slot = count + __popc(ballot & ((1u << lane) - 1u));
                    if (candidate && slot < MAXC) list[slot] = order[(index_t)b * width + j];
                    count += __popc(ballot);
                    if (ballot != 0xffffffffu) break;  // sorted: the rest are farther
                }
                decided = count <= MAXC;
            }
            __syncwarp();
            T best = max_value<T>();
            int best_index = 0x7fffffff;  // none yet
            if (decided) {
                double least = __longlong_as_double(0x7ff0000000000000ll);  // +inf
#pragma unroll 2
                for (int c = 0; c < count; ++c) {
                    const double value =
                        warp_distance64(x, centers + (index_t)list[c] * d, d, lane);
                    if (lane == 0) dist[c] = value;
                    least = fmin(least, (1.0 + kappa_d) * value * (1.0 + eps) + absolute);
                }
                __syncwarp();
                // candidate c can still be the label: its lower bound not above `least`
                const auto survives = [&](int c) {
                    return c < count
                        && !((1.0 - kappa_d) * dist[c] * (1.0 - eps) - absolute > least);
                };
                int survivors = 0, only = 0;
                for (int c0 = 0; c0 < count; c0 += 32) {
                    const int c = c0 + lane;
                    const bool survivor = survives(c);
                    const unsigned ballot = __ballot_sync(0xffffffffu, survivor);
                    if (ballot != 0u) only = list[c0 + __ffs(ballot) - 1];
                    survivors += __popc(ballot);
                }
                if (survivors == 1) {
                    // the one that attains `least`: every other candidate's computed distance
                    // is above its upper bound, and that is below max_value<T>() (own < limit)
                    best_index = only;
                } else {
                    for (int c0 = 0; c0 < count; c0 += 32) {
                        const int c = c0 + lane;
                        if (survives(c)) {
                            const int j = list[c];
                            const T value = row_distance(x, centers + (index_t)j * d, d);
                            if (value < best
                                || (value == best && value < max_value<T>() && j < best_index)) {
                                best = value;
                                best_index = j;
                            }
                        }
                    }
                    group_argmin(best, best_index);
                }
            }
            if (!decided && lane == 0) rest[atomicAdd(rest_size, 1u)] = i;
            store_label(labels, i, decided && lane == 0, best_index == 0x7fffffff ? 0 : best_index,
                        changed);
            __syncwarp();  // the lists are read before the next row overwrites them
        }
        // (the rows are read before the next load overwrites them: the __syncwarp above)
    }
}

constexpr int SELECT_THREADS = GPUMINE_BLOCK;
static_assert(SELECT_THREADS == 256, "select_gap_rows: a thread per 8-bit digit");

// Each centre's `width` smallest gaps (centre_gaps' row b, width = min(k, 256)), ties by
// index, sorted ascending into sorted[b * width ...] with their centres in order[...]: what
// recheck_pruned's prefix scan reads (a row with more than MAXC < width candidates goes on,
// so nothing past them is needed). A block a row: the width-th smallest gap found by radix
// selection on its bits (non-negative floats order as their bits do; four 8-bit digits, a
// histogram and a scan each), the gaps below it and the lowest-index ones equal to it taken
// in index order (each thread a contiguous run of the row), then a bitonic sort of the
// 256 slots in shared memory (the empty ones +inf). Nothing is done when fewer than min_rows
// rows are queued (centre_gaps left the gaps unwritten).
__global__ void __launch_bounds__(SELECT_THREADS)
select_gap_rows(const float* __restrict__ gaps,           // IN  (k, k) centre_gaps
                int k,                                    // IN
                int width,                                // IN  min(k, SELECT_THREADS)
                const unsigned* __restrict__ queue_size,  // IN  (1)
                unsigned min_rows,                        // IN
                float* __restrict__ sorted,               // OUT (k, width)
                int* __restrict__ order)                  // OUT (k, width) their centres
{
    if (*queue_size < min_rows) return;  // uniform across the grid
    constexpr int SLOTS = SELECT_THREADS;
    __shared__ unsigned key[SLOTS];
    __shared__ int index[SLOTS];
    __shared__ int histogram[256];
    __shared__ int scratch[SELECT_THREADS / 32];
    __shared__ int chosen[2];  // the digit, the count below it
    const float* row = gaps + (index_t)blockIdx.x * k;
    // thread t's run of the row: [begin, end), in index order
    const int run = (k + SELECT_THREADS - 1) / SELECT_THREADS;
    const int begin = min(k, (int)threadIdx.x * run), end = min(k, begin + run);
    unsigned prefix = 0u, mask = 0u;
    int wanted = width;  // the rank (1-based) of the threshold among the gaps still matching
    for (int shift = 24; shift >= 0; shift -= 8) {
        histogram[threadIdx.x] = 0;  // SELECT_THREADS == 256 bins
        __syncthreads();
        for (int i = begin; i < end; ++i) {
            const unsigned bits = __float_as_uint(row[i]);
            if ((bits & mask) == prefix) atomicAdd(&histogram[(bits >> shift) & 255u], 1);
        }
        __syncthreads();
        const int count = histogram[threadIdx.x];
        const int below = block_exclusive_sum<SELECT_THREADS>(count, scratch);
        if (below < wanted && wanted <= below + count) {  // exactly one digit
            chosen[0] = threadIdx.x;
            chosen[1] = below;
        }
        __syncthreads();
        prefix |= (unsigned)chosen[0] << shift;
        mask |= 255u << shift;
        wanted -= chosen[1];
    }
    // prefix is the width-th smallest gap's bits; `wanted` of the gaps equal to it are taken
    // (the lowest indices), with every gap below it
    int less = 0, equal = 0;
    for (int i = begin; i < end; ++i) {
        const unsigned bits = __float_as_uint(row[i]);
        less += bits < prefix;
        equal += bits == prefix;
    }
    int total_less;
    const int less_before = block_exclusive_sum<SELECT_THREADS>(less, scratch, &total_less);
    const int equal_before = block_exclusive_sum<SELECT_THREADS>(equal, scratch);
    key[threadIdx.x] = 0xffffffffu;  // empty: after every gap
    index[threadIdx.x] = 0x7fffffff;
    __syncthreads();
    int slot_less = less_before, rank_equal = equal_before;
    for (int i = begin; i < end; ++i) {
        const unsigned bits = __float_as_uint(row[i]);
        if (bits < prefix) {
            key[slot_less] = bits;
            index[slot_less++] = i;
        } else if (bits == prefix && rank_equal < wanted) {
            key[total_less + rank_equal] = bits;
            index[total_less + rank_equal++] = i;
        } else if (bits == prefix) {
            ++rank_equal;
        }
    }
    __syncthreads();
    for (int size = 2; size <= SLOTS; size <<= 1)
        for (int half = size >> 1; half > 0; half >>= 1) {
            const int i = threadIdx.x, j = i ^ half;
            if (j > i) {
                const unsigned a = key[i], c = key[j];
                const int ia = index[i], ic = index[j];
                const bool greater = a > c || (a == c && ia > ic);
                if (greater == ((i & size) == 0)) {  // out of this run's direction
                    key[i] = c;
                    key[j] = a;
                    index[i] = ic;
                    index[j] = ia;
                }
            }
            __syncthreads();
        }
    if (threadIdx.x < width) {
        sorted[(index_t)blockIdx.x * width + threadIdx.x] = __uint_as_float(key[threadIdx.x]);
        order[(index_t)blockIdx.x * width + threadIdx.x] = index[threadIdx.x];
    }
}

// The GEMM path's epilogue (d > the fused kernel's DP): a warp per row of the product tile
// G = X_tile . C^T (rows x k_pad, row-major; float32 GEMM for tc-exact, TF32 for tc-fast),
// top-2 of ||c||^2 - 2 G, then the same decision as assign_tc_half.
__global__ void tc_gemm_epilogue(const float* __restrict__ products,  // IN  (rows, ldp)
                                 int ldp,                              // IN  row stride
                                 const float* __restrict__ norms,     // IN  (k_pad)
                                 const double* __restrict__ x_norm2,  // IN  (rows) ||x||^2
                                 const unsigned* __restrict__ cmax,   // IN  (1) float bits
                                 const double* __restrict__ bound,    // IN  (5)
                                 index_t rows,                         // IN
                                 index_t row0,                         // IN  first row's index
                                 int k,                                // IN
                                 int* __restrict__ labels,            // INOUT (n)
                                 unsigned long long* changed,         // INOUT (1) may be null
                                 unsigned* __restrict__ queue_size,   // INOUT (1)
                                 index_t* __restrict__ queue,         // OUT (n)
                                 int* __restrict__ queue_best)        // OUT (n) best by score
{
    const int lane = threadIdx.x & 31;
    const index_t row = ((index_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (row >= rows) return;  // whole warps leave together
    Top2 t;
    top2_init(t);
    for (int j = lane; j < k; j += 32) top2_push(t, fmaf(-2.0f, products[row * ldp + j], norms[j]), j);
    for (int mask = 1; mask < 32; mask <<= 1) top2_merge_lanes(t, mask);
    const bool active = lane == 0;
    const bool decided = active && top2_decides(t, x_norm2[row],
                                                (double)__uint_as_float(*cmax), bound);
    finish_row(labels, row0 + row, active, decided, t.index, active ? labels[row0 + row] : 0,
               changed, queue_size, queue, queue_best);
}

// ---------------------------------------------------------------------------------------
// The fused kernel (d <= 128): scaled FP16. FP16 mma.sync (m16n8k16) runs twice TF32's rate
// and packs two features per register; FP16 has TF32's 11-bit significand but a narrow
// exponent range, so every row of points is scaled by its own power of two and the centres
// by one common power of two (from cmax) so that every |value| < 2^13: the scaling is
// exact, the products are unscaled by one power of two per row (folded into the score's
// FMA), and what FP16 cannot hold below its normal range is a tiny absolute error the
// bound carries (gpumine/kmeans/tensor_cores.py).

// Round to FP16 (to nearest even) and back.
__device__ __forceinline__ unsigned short to_half_bits(float x) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
    return h;
}

__device__ __forceinline__ float half_bits_to_float(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

// The FP16 split of v (|v| < 2^13): hi = fp16(v), lo = fp16(v - hi), v - hi exact in float;
// returns v - hi (what the product of hi alone leaves out).
__device__ __forceinline__ float half_split(float v, unsigned short& hi, unsigned short& lo) {
    hi = to_half_bits(v);
    const float rest = v - half_bits_to_float(hi);
    lo = to_half_bits(rest);
    return rest;
}

// Two FP16 values in one register, the lower feature in the low half (mma's order).
__device__ __forceinline__ unsigned pack_halves(unsigned short low, unsigned short high) {
    return (unsigned)low | ((unsigned)high << 16);
}

// Four (two) 8 x 8 matrices of 16-bit values from shared memory, a 16-byte row address a
// lane (lanes 0-7 the first matrix's rows, 8-15 the second's, ...): each lane receives row
// lane / 4, values 2 (lane % 4) and + 1 of each matrix, mma.sync's fragment layout.
// ... from a shared-space byte address: a caller that converts a base once and adds
// constant offsets has ptxas fold them into the instruction (a base in words plus a
// pointer per call took two address instructions a load, IADD3 and LEA: 15 % of the
// screen's instructions, ncu-screen-src-h200-2026-11-28-c350fb2).
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned address) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(address));
}

__device__ __forceinline__ void ldmatrix_x2(unsigned (&r)[2], unsigned address) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(address));
}

__device__ __forceinline__ unsigned shared_address(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

// D = A (16 x 16, row) * B (16 x 8, col) + D, FP16 inputs, FP32 accumulation.
__device__ __forceinline__ void mma_f16(float (&acc)[4], const unsigned (&a)[4],
                                        const unsigned (&b)[2]) {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// gpumine.kmeans.accumulation's probe of the accumulation model the bound rests on: warp w
// computes D = C + A_0 B_0 + ... + A_{steps-1} B_{steps-1} with one mma_f16 a step, as the
// fused kernel accumulates, each operand read from global memory in the mma's fragment
// layout (lane = 4 group + member: A rows group and group + 8, columns 2 member + 0/1 and
// + 8; B columns group, rows 2 member + 0/1 and + 8; C and D rows group and group + 8,
// columns 2 member + 0/1).
__global__ void mma_accumulation_probe(
    const unsigned short* __restrict__ A,  // IN  (P, S, 16, 16) FP16 bits, row-major
    const unsigned short* __restrict__ B,  // IN  (P, S, 16, 8) FP16 bits, k x n
    const float* __restrict__ C,           // IN  (P, 16, 8)
    int steps, int problems,               // IN  S, P
    float* __restrict__ D)                 // OUT (P, 16, 8)
{
    const int warp = (int)(((index_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5);
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    if (warp >= problems) return;  // a whole warp leaves: the mma's lanes stay together
    auto pack = [](unsigned short low, unsigned short high) {
        return (unsigned)low | ((unsigned)high << 16);
    };
    const float* c = C + (index_t)warp * 128;
    float acc[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1],
                    c[(g + 8) * 8 + 2 * t], c[(g + 8) * 8 + 2 * t + 1]};
    for (int s = 0; s < steps; ++s) {
        const unsigned short* a = A + ((index_t)warp * steps + s) * 256;
        const unsigned short* b = B + ((index_t)warp * steps + s) * 128;
        const unsigned fa[4] = {pack(a[g * 16 + 2 * t], a[g * 16 + 2 * t + 1]),
                                pack(a[(g + 8) * 16 + 2 * t], a[(g + 8) * 16 + 2 * t + 1]),
                                pack(a[g * 16 + 2 * t + 8], a[g * 16 + 2 * t + 9]),
                                pack(a[(g + 8) * 16 + 2 * t + 8], a[(g + 8) * 16 + 2 * t + 9])};
        const unsigned fb[2] = {pack(b[(2 * t) * 8 + g], b[(2 * t + 1) * 8 + g]),
                                pack(b[(2 * t + 8) * 8 + g], b[(2 * t + 9) * 8 + g])};
        mma_f16(acc, fa, fb);
    }
    float* d = D + (index_t)warp * 128;
    d[g * 8 + 2 * t] = acc[0];
    d[g * 8 + 2 * t + 1] = acc[1];
    d[(g + 8) * 8 + 2 * t] = acc[2];
    d[(g + 8) * 8 + 2 * t + 1] = acc[3];
}

// 2^e as a float, for -126 <= e <= 127.
__device__ __forceinline__ float pow2f(int e) { return __int_as_float((e + 127) << 23); }

// The exponent s with 2^s * v < 2^13 for every |v| <= top, and 2^s * top >= 2^12 when
// top > 0 (s = 13 for zero or a non-finite top, whose rows the caller never decides).
__device__ __forceinline__ int half_scale(float top) {
    int e = 0;
    if (top > 0.0f && top <= max_value<float>()) frexpf(top, &e);  // top < 2^e <= 2 top
    return 13 - e;
}

// tc_prepare_centers' shifted float32 centres scaled by 2^half_scale(cmax) (every
// |c_j| <= ||c|| <= cmax) and split into FP16 hi and lo, two features per word. A thread
// per word of the (k_pad, dp / 2) outputs.
__global__ void tc_split_centers(const float* __restrict__ padded,  // IN  (k_pad, dp)
                                 index_t words,                     // IN  k_pad * dp / 2
                                 const unsigned* __restrict__ cmax, // IN  (1) float bits
                                 unsigned* __restrict__ hi,         // OUT (k_pad, dp / 2)
                                 unsigned* __restrict__ lo)         // OUT (k_pad, dp / 2)
{
    const int scale = half_scale(__uint_as_float(*cmax));
    for (index_t w = (index_t)blockIdx.x * blockDim.x + threadIdx.x; w < words;
         w += (index_t)gridDim.x * blockDim.x) {
        unsigned short h0, l0, h1, l1;
        half_split(ldexpf(padded[2 * w], scale), h0, l0);
        half_split(ldexpf(padded[2 * w + 1], scale), h1, l1);
        hi[w] = pack_halves(h0, h1);
        lo[w] = pack_halves(l0, l1);
    }
}

// The screen's centre term: the largest ||c - c_hi|| over the centres (c_hi: the FP16 hi part
// tc_split_centers makes, unscaled), rounded up, by an atomicMax on its float bits. A warp
// per padded centre (zero past d and k).
__global__ void tc_center_residuals(const float* __restrict__ padded,  // IN  (k_pad, dp)
                                    int k_pad, int dp,                 // IN
                                    const unsigned* __restrict__ cmax, // IN  (1) float bits
                                    unsigned* __restrict__ c_residual) // INOUT (1) float bits,
                                                                       //       zeroed before
{
    const int scale = half_scale(__uint_as_float(*cmax));
    const int c = (int)(((index_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5);
    const int lane = threadIdx.x & 31;
    if (c >= k_pad) return;  // whole warps leave
    double sum = 0.0;
    for (int j = lane; j < dp; j += 32) {
        unsigned short hi, lo;
        const float rest = half_split(ldexpf(padded[(index_t)c * dp + j], scale), hi, lo);
        sum += (double)rest * (double)rest;
    }
    for (int offset = 16; offset > 0; offset >>= 1)
        sum += __shfl_down_sync(0xffffffffu, sum, offset);
    if (lane == 0)  // unscaled (a power of two: exact), rounded up to float
        atomicMax(c_residual, __float_as_uint(__double2float_ru(ldexp(sqrt(sum), -scale))));
}

// The next call's pass (plan[0]: 1 the screen then the split kernel on the screen's queued
// rows, 0 the split kernel alone): the screen while it leaves at most `limit` rows, as it
// did (plan 1: its queue) or would have (plan 0: the split kernel's count). One thread.
__global__ void tc_screen_plan(int* __restrict__ plan,                   // INOUT (1)
                               const unsigned* __restrict__ screen_queue, // IN (1)
                               const unsigned* __restrict__ screen_misses,// IN (1)
                               unsigned limit)                            // IN
{
    const unsigned left = plan[0] == 1 ? *screen_queue : *screen_misses;
    plan[0] = left <= limit ? 1 : 0;
}

// The passes over the rows a bounds run lists (gpumine.kmeans.tensor_cores.assign_listed),
// plan[0]: 1 the screen over the listed rows, then the split kernel over those it leaves;
// 2 the split kernel alone over the listed rows (tc_listed_forward copies the list where
// the screen's queue would be), counting the rows the screen would leave. The next call
// screens while the screen leaves at most `share` of the listed rows. One thread.
__global__ void tc_listed_plan(int* __restrict__ plan,                   // INOUT (1)
                               const unsigned* __restrict__ listed,       // IN (1)
                               const unsigned* __restrict__ screen_queue, // IN (1)
                               const unsigned* __restrict__ screen_misses,// IN (1)
                               double share)                              // IN
{
    const unsigned left = plan[0] == 1 ? *screen_queue : *screen_misses;
    plan[0] = (double)left <= share * (double)*listed ? 1 : 2;
}

// Under plan 2 (tc_listed_plan) the listed rows and their count where the screen would
// have written its queue, for the split kernel; under plan 1 nothing (the screen did).
__global__ void __launch_bounds__(256)
tc_listed_forward(const int* __restrict__ plan,        // IN  (1)
                  const index_t* __restrict__ rows,    // IN  the listed rows
                  const unsigned* __restrict__ listed, // IN  (1) how many
                  index_t* __restrict__ forwarded,     // OUT the same rows
                  unsigned* __restrict__ count)        // OUT (1) how many
{
    if (plan[0] != 2) return;
    const index_t size = *listed;
    if (blockIdx.x == 0 && threadIdx.x == 0) *count = (unsigned)size;
    for (index_t q = (index_t)blockIdx.x * blockDim.x + threadIdx.x; q < size;
         q += (index_t)gridDim.x * blockDim.x)
        forwarded[q] = rows[q];
}

// Asynchronous global-to-shared copies of 16 bytes (sm_80), in commit groups.
__device__ __forceinline__ void copy_async16(void* shared, const void* global) {
    const unsigned address = (unsigned)__cvta_generic_to_shared(shared);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(address), "l"(global));
}

// ... of 8 bytes (through L1: the 4- and 8-byte forms have no .cg).
__device__ __forceinline__ void copy_async8(void* shared, const void* global) {
    const unsigned address = (unsigned)__cvta_generic_to_shared(shared);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(address), "l"(global));
}

// ... of 4 bytes.
__device__ __forceinline__ void copy_async4(void* shared, const void* global) {
    const unsigned address = (unsigned)__cvta_generic_to_shared(shared);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(address), "l"(global));
}

__device__ __forceinline__ void copy_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int PENDING>
__device__ __forceinline__ void copy_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING));
}

// Shape of assign_tc_half at DP features: centres a tile (64, or 32 for the split kernel at
// DP = 128: two blocks an SM; 128 for the one-product kernel up to DP = 32); whether the
// warps hold their fragments in registers (DP <=
// 64, and tc-fast's hi fragments at 128 too: 2.40 -> 2.25 ms at 1M x 128, k = 1024 on the
// H100, where the split kernel's hi and lo took 238 registers and ran slower, 3.78 -> 3.97
// ms; records tc-recheck-ab-h100-*-9eb2216 and -90aa895; the rows' staging area is then
// reused for the centre tiles); blocks an SM asked of the register
// allocator at DP <= 32: six for the split kernel (80 registers; left free it took 126,
// held to 72 it measured slower on the H100), six for the one-product kernel too (seven
// before its keys; with them six and eight measured alike, 1 % ahead of seven at 10M x 32,
// k = 1024 on the H200, record tc-keys-variants-h200-2026-11-28-417588d.json);
// three for the one-product kernel at 128 (the screen: 243 registers left free, 2 blocks an
// SM; 168 and three blocks, a few values of the staged row spilled: 1.43 -> 1.36 ms at 1M
// x 128, k = 1024 on the H100, record tc-screen-min-blocks-h100-2026-11-28-d7ebea2.txt),
// and at 64 (the keyed top-2 beside the plain one took it from 168 registers, three blocks,
// to 197 and two; held to three blocks, 165 without a spill).
template <int DP, bool SPLIT>
struct HalfTile {
    static constexpr int BN = !SPLIT && DP <= 32 ? 128 : SPLIT && DP >= 128 ? 32 : 64;
    static constexpr bool HELD = DP <= 64 || !SPLIT;
    static constexpr int MIN_BLOCKS = DP <= 32 ? 6 : (!SPLIT ? 3 : 1);
};

// The fused assignment on FP16 tensor cores, d <= DP (a multiple of 16). SEED (a bounds
// run's seed, DP <= 32, or its scan over the rows its filter listed, every DP) also writes
// the Hamerly bounds of each row it decides into upper and lower (seed_bounds;
// a template argument: the pointers and the branch cost the DP = 32 screen 2 % of its time
// as arguments, record tc-seed-args-ab-h200-ff9f081.json). A block of 4 warps takes 128
// rows (32 per warp: two m16 tiles) and walks the centres in tiles of BN (BN / 8 n8 tiles).
// The block's rows are shifted into float32, scaled per row and split into FP16 hi and lo
// in shared memory once; centre tiles (split by tc_split_centers) are double-buffered in
// shared memory by asynchronous copies, the next tile landing while this one is
// multiplied. SPLIT (tc-exact) accumulates hi.hi and, apart, lo.hi + hi.lo, otherwise
// hi.hi alone (tc-fast). The score ||c||^2 - 2 x.c takes the product unscaled by the row's
// coefficient -2^(1 - s_row - s_centres) in its one FMA. Rows whose coefficient leaves
// float's range, or with a non-finite value, are never decided.
// The screen (tc-exact's first pass where the plan says so: gpumine.kmeans.tensor_cores,
// "The screen"): SPLIT false with `c_residual`, hi.hi alone, each row decided where its
// margin also covers what the dropped lo parts can move, 2 (rho_x cmax + (|x| + rho_x)
// rho_c) by Cauchy-Schwarz, rho_x = ||x - x_hi|| (summed here as the row is split) and
// rho_c the centres' largest (tc_center_residuals); the other rows are queued. The split
// kernel then takes those rows (`rows`, `row_count`) where plan[0] is 1, every row where it
// is 0 -- counting there, with `screen_misses`, the rows the screen's margin would not
// decide (the next call's plan: tc_screen_plan). Where plan[0] is 2 (a bound run's first
// call, before its first plan: gpumine.kmeans.tensor_cores.SCREEN_SAMPLE_ROWS) the split
// kernel takes `rows` and counts there too: a sample of the rows, whose count gives that
// call its plan. `plan` null: one pass over every row; `rows` null (the screen not
// launched): the split kernel takes every row whatever the plan. Over the rows a bounds
// run lists (tc_listed_plan) the screen takes `rows` too, under plan 1.
// Shared memory (dynamic), words: the rows' staging area of 2 * 128 * SW and the centre
// buffers of 4 * BN * SW (one area when HELD: the staging is read into registers before
// the first centre tile is copied), then 2 * BN + 128 words, 128 + DP + 128 doubles, 128
// row indices (8 bytes) and 128 + 4 ints, SW = DP / 2 + 4
// (gpumine.kmeans.tensor_cores.half_shared_bytes).
template <typename T, int DP, bool SPLIT, bool SEED, bool KEYS>
__global__ void __launch_bounds__(128, HalfTile<DP, SPLIT>::MIN_BLOCKS)
assign_tc_half(const T* __restrict__ XT,            // IN  (d, n) points
               const double* __restrict__ shift,    // IN  (d) subtracted from every point
               const unsigned* __restrict__ c_hi,   // IN  (k_pad, DP / 2) tc_split_centers
               const unsigned* __restrict__ c_lo,   // IN  (k_pad, DP / 2)
               const float* __restrict__ norms,     // IN  (k_pad) ||c||^2, max float past k
               const unsigned* __restrict__ cmax,   // IN  (1) max ||c|| as float bits
               const double* __restrict__ bound,    // IN  (10) the split kernel's five (see
                                                    //   the top of this file), then the
                                                    //   one-product kernel's
               index_t n,                           // IN
               int d,                               // IN  d <= DP
               int k_pad,                           // IN  multiple of 64
               const int* __restrict__ plan,        // IN  (1) or null: the pass (above)
               const index_t* __restrict__ rows,    // IN  (n) the screen's queued rows
               const unsigned* __restrict__ row_count,   // IN  (1) how many
               const unsigned* __restrict__ c_residual,  // IN  (1) rho_c float bits, or null
               unsigned* __restrict__ screen_misses,     // INOUT (1) += rows (SPLIT, plan 0, 2)
               int* __restrict__ labels,            // INOUT (n) previous labels in
               unsigned long long* changed,         // INOUT (1) += labels changed, may be null
               unsigned* __restrict__ queue_size,   // INOUT (1) += rows queued
               index_t* __restrict__ queue,         // OUT (n) queued rows
               int* __restrict__ queue_best,        // OUT (n) their best centre by score
               float* __restrict__ upper,           // INOUT (n) SEED: Hamerly's bounds of the
               float* __restrict__ lower,           // INOUT (n)   rows it decides (seed_bounds)
               T* __restrict__ compact,             // OUT (d, cap) the screen's first cap rows,
                                                    // IN the split kernel's; or null
               index_t cap)                         // IN  a multiple of 128
{
    constexpr int BM = 128, BN = HalfTile<DP, SPLIT>::BN, NT = BN / 8, W = DP / 2, SW = W + 4;
    constexpr int KS = DP / 16;  // mma feature steps
    static_assert(DP % 16 == 0, "FP16 mma takes 16 features a step");
    extern __shared__ __align__(16) unsigned char shared_raw[];
    constexpr bool HELD = HalfTile<DP, SPLIT>::HELD;
    // The bound of this kernel's own scores, and the one-product kernel's (the screen's, which
    // the split kernel counts for): the split kernel past 64 features (not HELD) flushes its
    // large products an instruction at a time, a tighter bound (gpumine.kmeans.tensor_cores,
    // error_bound's "half" against "half-held").
    const double* held_bound = bound + 5;
    const double* own_bound = (SPLIT && !HELD) ? bound : held_bound;
    // (the one-product kernel reads no lo parts: its centre tiles take half the space; up to
    // 32 features they are twice as wide, a last one half full where k_pad is an odd
    // multiple of 64: 10M x 32, k = 1024 1.5-2.5 % faster on the H200, 4-5 % slower at 64
    // and 128 features, record tc-source-ab-bn128-2026-11-28-7d1f12c.json)
    constexpr int STAGING = 2 * BM * SW, CENTRES = (SPLIT ? 4 : 2) * BN * SW;
    unsigned* xh = reinterpret_cast<unsigned*>(shared_raw);  // BM x SW
    unsigned* xl = xh + BM * SW;                              // BM x SW
    unsigned* ch = HELD ? xh : xh + STAGING;                  // 2 x BN x SW
    unsigned* cl = ch + 2 * BN * SW;                          // 2 x BN x SW
    float* ns = reinterpret_cast<float*>(
        xh + (HELD ? (STAGING > CENTRES ? STAGING : CENTRES) : STAGING + CENTRES));  // 2 x BN
    float* coef = ns + 2 * BN;                                // BM
    double* xn = reinterpret_cast<double*>(coef + BM);        // BM  ||x||^2
    double* shifts = xn + BM;                                 // DP  shift, d of them
    double* dropped = shifts + DP;                            // BM  the screen's term
    index_t* row_ids = reinterpret_cast<index_t*>(dropped + BM);  // BM  rows' indices, n: none
    int* old_labels = reinterpret_cast<int*>(row_ids + BM);   // BM  labels before the call
    int* counting = old_labels + BM;                          // 2   count the screen's misses,
                                                              //     the rows the screen copies
    // the screen's rows to copy (epilogue), in the staging area, free there
    unsigned* copy_slots = xh;                                // BM  their slots in compact
    int* copy_rows = reinterpret_cast<int*>(xh + BM);         // BM  their rows in the tile
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int group = lane >> 2, member = lane & 3;
    // the pass: the screen runs under plan 1 only; the split kernel takes the screen's rows
    // there. What the epilogue needs of it waits in shared memory, not in registers through
    // the products.
    constexpr bool SCREENS = !SPLIT;  // the screen where c_residual is given, else tc-fast
    // the screen's copy of the rows it leaves, which the split kernel stages: float data
    // from 64 features (gpumine.kmeans.tensor_cores.SCREEN_COPY_SHARE), compiled out of the
    // other kernels (their code as before: a runtime branch had cost the one-product kernel
    // 2 % at 10M x 32, k = 1024, and NVRTC's allocation of the double split kernel 5 %,
    // tc-source-ab-screen-copy-h200-2026-11-28-4d5403f.json)
    constexpr bool COPIED = sizeof(T) == 4 && DP >= 64;
    constexpr bool COPIES = SCREENS && COPIED;
    const int pass = plan != nullptr ? plan[0] : -1;
    if (SCREENS && c_residual != nullptr && pass != 1) return;
    // the listed rows: the screen's (plan 1; null: the screen not run) or a sample (plan 2)
    // (the screen takes listed rows too: a bounds run's queue, tc_listed_plan, whose kernels
    // are SEED's; the other screens' code stays without the branch)
    const bool indirect = (SPLIT || SEED) && (pass == 1 || pass == 2) && rows != nullptr;
    const index_t active_rows = indirect ? (index_t)*row_count : n;
    if (threadIdx.x == 0)
        *counting = SPLIT && (pass == 0 || pass == 2) && c_residual != nullptr;
    const float cmax_value = __uint_as_float(*cmax);
    const int c_scale = half_scale(cmax_value);
    // the one-product kernel's keys (top2_push_key): bits for q < k_pad / 4, up to KEY_BITS
    // (k_pad <= GPUMINE_TC_KEY_CENTRES where KEYS, as the launcher picks)
    const int key_bits = 32 - __clz(max(k_pad / 4 - 1, 1));
    static_assert(!(KEYS && SPLIT), "keys are the one-product kernel's");
    constexpr bool keyed = KEYS;
    const int key_mask = (1 << key_bits) - 1;

    // Centre tile c0 into buffer b (one commit group per thread, empty or not). Chunk q = tid
    // + 128 i of the tile's BN * W / 4 16-byte chunks is centre q / (W / 4), words 4 (q %
    // (W / 4)) ..: contiguous in the source (4 q words from the tile's start), and in shared
    // memory each step of i moves 128 / (W / 4) centres on, the word unchanged. So the
    // copies take constant offsets from two addresses a thread computes once: an unrolled
    // loop of copies (the loop with a division and 64-bit addresses a copy was 12 % of the
    // screen's instructions at 1M x 128, k = 1024 on the H200, ncu record
    // ncu-screen-src-h200-2026-11-28-612f8d8).
    static_assert((BN * W / 4) % BM == 0 && BM % (W / 4) == 0, "whole chunks a thread");
    constexpr int CHUNKS = BN * W / 4 / BM, STEP = BM / (W / 4) * SW;
    const int tile_word = (threadIdx.x / (W / 4)) * SW + (threadIdx.x % (W / 4)) * 4;
    auto load_tile = [&](int c0, int b) {
        const bool whole = c0 + BN <= k_pad;  // else the first half alone (one-product)
        const unsigned* src_hi = c_hi + (index_t)c0 * W + 4 * threadIdx.x;
        const unsigned* src_lo = c_lo + (index_t)c0 * W + 4 * threadIdx.x;
        unsigned* dst_hi = ch + b * BN * SW + tile_word;
        unsigned* dst_lo = cl + b * BN * SW + tile_word;
#pragma unroll
        for (int q = 0; q < CHUNKS; ++q) {
            if (!(whole || q < CHUNKS / 2)) break;  // chunks from CHUNKS / 2: centres from BN / 2
            copy_async16(dst_hi + q * STEP, src_hi + q * 4 * BM);
            if (SPLIT) copy_async16(dst_lo + q * STEP, src_lo + q * 4 * BM);
        }
        if (threadIdx.x < (whole ? BN / 4 : BN / 8))
            copy_async16(ns + b * BN + 4 * threadIdx.x, norms + c0 + 4 * threadIdx.x);
        copy_async_commit();
    };
    // The block's tiles of 128 rows: blockIdx.x, then gridDim.x on (a grid of one block a
    // tile takes one each). The split kernel's pass over the screen's rows is launched with
    // one wave of blocks (gpumine.kmeans.tensor_cores.INDIRECT_WAVES), not a block a tile of
    // every row, most of them leaving at once: 4 % off a bound call at 1M x 128 and 1M x
    // 100, k = 1024 from the first rows as centres on the H200, the rest within 1 % (record
    // tc-settings-indirect-waves-h200-2026-11-28-2629092.json).
    for (index_t row0 = (index_t)blockIdx.x * BM; row0 < active_rows;
         row0 += (index_t)gridDim.x * BM) {
        if (!HELD) load_tile(0, 0);  // lands while the rows are staged

        {   // Stage this block's rows: shifted into float32, scaled, split, in two passes over
            // the row (the scale needs its largest value). Float data lands in shared memory
            // first, every copy of the block's rows in flight at once (feature j of row r at
            // raw[j * BM + r], in the staging area), and each thread holds its row in registers
            // for both passes: loads from global memory into registers had ptxas issue them a
            // few at a time, each batch waiting on memory (at 1M x 128 the kernel took 1.10 ms
            // with 64 centres, 3.25 with 1024 under ncu: ncu-tc-kernels-h100-2026-11-27-a86e510;
            // tc-stage-ab-h100-2026-11-27-5de7db9). Double data is read into registers as
            // before: from 64 features the row once, held; below, the second pass reads it
            // again from L1/L2. The shift and the rows' previous labels come into shared memory
            // with the rows: the shift had been a global load per value, and the epilogue
            // waited on each row's label in turn (about half the kernel at 1M x 32 with 64
            // centres: ncu-src-*-h100-2026-11-27-20ddee8).
            constexpr bool ASYNC = sizeof(T) == 4;
            constexpr bool HOLD_ROW = ASYNC || DP >= 64;
            const index_t local_row = row0 + threadIdx.x;
            const index_t i = local_row >= active_rows ? n
                              : indirect ? rows[local_row] : local_row;
            row_ids[threadIdx.x] = i;
            const float* raw = reinterpret_cast<const float*>(xh);
            // the shift and the rows' labels (read in the epilogue) arrive with the rows
            // (zero past d, so that float data is read without a test a value)
            if (threadIdx.x < d) copy_async8(shifts + threadIdx.x, shift + threadIdx.x);
            else if (threadIdx.x < DP) shifts[threadIdx.x] = 0.0;
            const int previous = i < n ? labels[i] : 0;
            if (COPIES && threadIdx.x == 0) counting[1] = 0;  // the screen's rows copied
            if constexpr (ASYNC) {
                static_assert(BM == 128, "a thread a row, and four rows of 16 bytes a warp");
                float* tile = reinterpret_cast<float*>(xh);  // DP * BM <= 2 * BM * SW words
                for (int j = d; j < DP; ++j) tile[j * BM + threadIdx.x] = 0.0f;
                const int here = (int)min((index_t)BM, active_rows - row0);
                // the screen's rows from its compact copy where they are in it (slots up to
                // cap, a multiple of 128: a tile is in it or not), as contiguous as every row
                const bool packed = COPIED && indirect && compact != nullptr && row0 < cap;
                const T* source = packed ? compact : XT;
                const index_t stride = packed ? cap : n;
                if ((!indirect || packed) && stride % 4 == 0
                    && (reinterpret_cast<unsigned long long>(source) & 15ull) == 0) {
                    // every column 16-byte aligned, and `here` a multiple of 4: a warp copies
                    // one feature's 128 rows, the block four features at a time
                    const int r = lane * 4;
                    if (r < here)
                        for (int j = warp; j < d; j += 4)
                            copy_async16(tile + j * BM + r, source + (index_t)j * stride + row0 + r);
                } else if ((int)threadIdx.x < here) {
                    for (int j = 0; j < d; ++j)
                        copy_async4(tile + j * BM + threadIdx.x, XT + (index_t)j * n + i);
                }
            }
            copy_async_commit();
            old_labels[threadIdx.x] = previous;
            copy_async_wait<0>();  // (and the first centre tile's, where it was asked before)
            __syncthreads();
            // Float data without a branch a value: the tile holds zeros past d (shift zero
            // there too); a row past n reads what its slot holds, which reaches only that row's
            // scores (never decided). The branches and their tests were 4 of the staging's 34
            // instructions a feature (ncu-screen-src-h200-2026-11-28-612f8d8).
            auto load = [&](int j) {
                if constexpr (ASYNC) {
                    return (float)((double)raw[j * BM + threadIdx.x] - shifts[j]);
                } else {
                    if (!(i < n && j < d)) return 0.0f;
                    return (float)((double)XT[(index_t)j * n + i] - shifts[j]);
                }
            };
            float row[HOLD_ROW ? DP : 1];
            if constexpr (HOLD_ROW) {
#pragma unroll
                for (int j = 0; j < DP; ++j) row[j] = load(j);
            }
            if constexpr (ASYNC) __syncthreads();  // every row read before the split overwrites it
            auto value = [&](int j) {
                if constexpr (HOLD_ROW) return row[j];
                else return load(j);
            };
            double norm2 = 0.0;
            float top = 0.0f;
#pragma unroll(HOLD_ROW ? DP : 16)
            for (int j = 0; j < DP; ++j) {
                const float v = value(j);
                norm2 = fma((double)v, (double)v, norm2);
                top = fmaxf(top, fabsf(v));
            }
            // every value finite exactly when the sum of squares is (a float's square cannot
            // overflow a double, nor can DP of them)
            const bool finite = isfinite(norm2);
            // the scale 2^r_scale as two exact factors (ldexpf's result bit for bit: one
            // rounded product where r_scale <= 127, else exact ones; ldexpf itself took about
            // seven instructions a value)
            const int r_scale = half_scale(top);
            const int r_first = min(r_scale, 127);
            const float scale_first = pow2f(r_first), scale_rest = pow2f(r_scale - r_first);
            double rest2 = 0.0;  // ||x - x_hi||^2, scaled
#pragma unroll(HOLD_ROW ? W : 8)
            for (int w = 0; w < W; ++w) {
                unsigned short h0, l0, h1, l1;
                const float r0 = half_split(value(2 * w) * scale_first * scale_rest, h0, l0);
                const float r1 = half_split(value(2 * w + 1) * scale_first * scale_rest, h1, l1);
                rest2 = fma((double)r0, (double)r0, rest2);
                rest2 = fma((double)r1, (double)r1, rest2);
                xh[threadIdx.x * SW + w] = pack_halves(h0, h1);
                if (SPLIT) xl[threadIdx.x * SW + w] = pack_halves(l0, l1);  // the screen: hi alone
            }
            xn[threadIdx.x] = norm2;
            if (c_residual != nullptr) {  // 2 (rho_x cmax + (|x| + rho_x) rho_c), with a margin
                // for its double rounding; rho_x unscaled by a power of two (exact)
                const double rho_x = ldexp(sqrt(rest2), -r_scale);
                const double rho_c = (double)__uint_as_float(*c_residual);
                const double moved = 2.0 * (rho_x * (double)cmax_value
                                            + (sqrt(norm2) + rho_x) * rho_c) * (1.0 + 0x1p-20);
                // and what the keys move the scores by, from the score error they then carry
                // (the split kernel counts the rows the screen would leave with the same term)
                const double keys = key_bits > KEY_BITS ? 0.0 : key_error(
                    key_bits, norm2, cmax_value, top2_error(norm2, cmax_value, held_bound,
                                                             moved));
                dropped[threadIdx.x] = moved + keys;
            }
            const int e = 1 - r_scale - c_scale;  // coefficient -2^e
            coef[threadIdx.x] = (finite && e >= -120 && e <= 120)
                ? -ldexpf(1.0f, e) : __int_as_float(0x7fc00000);  // NaN: never decided
        }
        __syncthreads();
        if constexpr (DP <= 32) {
            // The block's next tile of rows (a striding grid) into L2 while this one is
            // multiplied, so that its staging waits on L2, not on memory: every feature of
            // each listed row (and its label), or the tile's lines where its rows are
            // contiguous (a striding screen over X: a first call's, after its sample). No
            // compact copy below 64 features (COPIED), so the rows are XT's. A hint: no
            // value depends on it. Whole hamerly fits in one process,
            // fits equal (hamerly-ab-prefetch-435a933-2026-11-29-435a933.json, H200): a
            // steady iteration 0.973x at 10M x 32, k = 1024 (the screen over 45 % of the
            // rows, scattered), 1.023x at 1M x 128 (a prefetch a value of 128 features: not
            // there).
            const index_t next0 = row0 + (index_t)gridDim.x * BM;
            static_assert(!COPIED, "the screen copies rows from 64 features only");
            if (next0 < active_rows) {
                if (indirect) {
                    const index_t local = next0 + threadIdx.x;
                    if (local < active_rows) {
                        const index_t r = rows[local];
                        prefetch_l2(labels + r);
                        for (int j = 0; j < d; ++j) prefetch_l2(XT + (index_t)j * n + r);
                    }
                } else {
                    constexpr int LINE = 128 / sizeof(T);  // values a 128-byte line
                    for (int q = threadIdx.x; q < d * (BM / LINE); q += BM) {
                        const index_t first = next0 + (q % (BM / LINE)) * LINE;
                        if (first < n) prefetch_l2(XT + (index_t)(q / (BM / LINE)) * n + first);
                    }
                    if (threadIdx.x < BM / 32 && next0 + 32 * threadIdx.x < n)
                        prefetch_l2(labels + next0 + 32 * threadIdx.x);
                }
            }
        }

        Top2 top[2][2];  // [m tile][row group, row group + 8]
        float row_coef[2][2];
#pragma unroll
        for (int m = 0; m < 2; ++m) {
            top2_init(top[m][0]);
            top2_init(top[m][1]);
            row_coef[m][0] = coef[warp * 32 + m * 16 + group];
            row_coef[m][1] = coef[warp * 32 + m * 16 + 8 + group];
        }
        const unsigned* xhw = xh + warp * 32 * SW;
        const unsigned* xlw = xl + warp * 32 * SW;
        // A fragment (m16 x k16) of m tile m, feature step s from the split rows xs, by one
        // ldmatrix.x4: lanes 0-7 give rows 0-7 of features 0-7 (a[0]), lanes 8-15 rows 8-15
        // (a[1]), lanes 16-31 the same rows' features 8-15 (a[2], a[3]). Rows SW = 68 words
        // apart fall in 8 distinct 4-bank groups: no bank conflict.
        // (xs: the lane's shared address of m tile 0, feature step 0; words 4 bytes)
        auto load_a = [&](unsigned (&a)[4], unsigned xs, int m, int s) {
            ldmatrix_x4(a, xs + 4 * (m * 16 * SW + s * 8));
        };
        const unsigned xhw_at = shared_address(xhw + (lane & 15) * SW + (lane >> 4) * 4);
        const unsigned xlw_at = shared_address(xlw + (lane & 15) * SW + (lane >> 4) * 4);
        // Fold n8 tile t's scores (two columns of rows group and group + 8 per m tile).
        auto push_scores = [&](const float (&acc)[2][4], const float* nst, int c0, int t) {
            const int col = t * 8 + 2 * member;
            const float n0 = nst[col], n1 = nst[col + 1];
            if constexpr (keyed) {  // keys (top2_push_key): q = 2 (tile's centre / 8) + column
                const int q0 = 2 * ((c0 >> 3) + t);
#pragma unroll
                for (int m = 0; m < 2; ++m) {
                    top2_push_key(top[m][0], fmaf(acc[m][0], row_coef[m][0], n0), q0, key_mask);
                    top2_push_key(top[m][0], fmaf(acc[m][1], row_coef[m][0], n1), q0 + 1, key_mask);
                    top2_push_key(top[m][1], fmaf(acc[m][2], row_coef[m][1], n0), q0, key_mask);
                    top2_push_key(top[m][1], fmaf(acc[m][3], row_coef[m][1], n1), q0 + 1, key_mask);
                }
                return;
            }
#pragma unroll
            for (int m = 0; m < 2; ++m) {
                top2_push(top[m][0], fmaf(acc[m][0], row_coef[m][0], n0), c0 + col);
                top2_push(top[m][0], fmaf(acc[m][1], row_coef[m][0], n1), c0 + col + 1);
                top2_push(top[m][1], fmaf(acc[m][2], row_coef[m][1], n0), c0 + col);
                top2_push(top[m][1], fmaf(acc[m][3], row_coef[m][1], n1), c0 + col + 1);
            }
        };
        // The small products (lo.hi + hi.lo, SPLIT only) are 2^-10 of the large ones (hi.hi), and
        // what an mma's accumulation cuts scales with what the accumulator holds, so the small
        // products' instructions cost little where they run before any large one: every small
        // product goes in first, or into an accumulator of its own added at the end. Either way
        // only the large products' d / 16 instructions carry the large magnitudes, not 3d / 16: a
        // third of the bound and of the rows re-checked (gpumine/kmeans/tensor_cores.py).
        // B fragments of n8 tile t, features 16 s ..: by ldmatrix.x2, lanes 0-7 give centres
        // t * 8 .. + 7 at features 0-7, lanes 8-15 at features 8-15 (the others' addresses are
        // not read).
        // (the lane's shared address of n8 tile 0, feature step 0 in a centre buffer, and the
        // bytes to tile t, step s)
        auto b_lane = [&](const unsigned* tile) {
            return shared_address(tile + (lane & 7) * SW + ((lane >> 3) & 1) * 4);
        };
        auto b_offset = [&](int t, int s) { return 4 * (t * 8 * SW + s * 8); };
        auto multiply_small = [&](float (&acc)[2][4], const unsigned (&a0)[4],
                                  const unsigned (&a1)[4], const unsigned (&l0)[4],
                                  const unsigned (&l1)[4], const unsigned (&bh)[2],
                                  const unsigned (&bl)[2]) {
            mma_f16(acc[0], l0, bh);
            mma_f16(acc[1], l1, bh);
            mma_f16(acc[0], a0, bl);
            mma_f16(acc[1], a1, bl);
        };
        auto multiply_large = [&](float (&acc)[2][4], const unsigned (&a0)[4],
                                  const unsigned (&a1)[4], const unsigned (&bh)[2]) {
            mma_f16(acc[0], a0, bh);
            mma_f16(acc[1], a1, bh);
        };
        // Up to 64 features (tc-fast: 128) the warp's fragments stay in registers for the whole
        // kernel and each n8 tile is finished (all features) before the next, so only one tile's
        // accumulators are live (writing the next tile's products before this one's fold, or
        // the mma as volatile asm, did not change the compiled schedule on sm_90). The split
        // kernel at 128 features reads them from shared memory per feature step, over all n8
        // tiles (the lo fragments unused by tc-fast are never read, so take no registers).
        static_assert(HELD == (KS <= 4 || !SPLIT), "fragments held to 64 features, or hi alone");
        unsigned a_hi[2][HELD ? KS : 1][4], a_lo[2][HELD ? KS : 1][4];
        if constexpr (HELD) {
#pragma unroll
            for (int m = 0; m < 2; ++m)
#pragma unroll
                for (int s = 0; s < KS; ++s) {
                    load_a(a_hi[m][s], xhw_at, m, s);
                    if (SPLIT) load_a(a_lo[m][s], xlw_at, m, s);
                    else
#pragma unroll
                        for (int e = 0; e < 4; ++e) a_lo[m][s][e] = 0u;
                }
            __syncthreads();  // every warp holds its fragments: the staging area takes centres
            load_tile(0, 0);
        }
        for (int c0 = 0, b = 0; c0 < k_pad; c0 += BN, b ^= 1) {
            if (c0 + BN < k_pad) {
                load_tile(c0 + BN, b ^ 1);
                copy_async_wait<1>();  // this tile's copies landed, the next one's in flight
            } else {
                copy_async_wait<0>();
            }
            __syncthreads();
            const unsigned cht = b_lane(ch + b * BN * SW), clt = b_lane(cl + b * BN * SW);
            const float* nst = ns + b * BN;
            if constexpr (HELD) {
#pragma unroll
                for (int t = 0; t < NT; ++t) {
                    if (!SPLIT && t == NT / 2 && c0 + BN > k_pad) break;  // a half tile, the last
                    // one accumulator: every small product of the tile first, then the large ones
                    float acc[2][4] = {};
                    unsigned bh[KS][2];
#pragma unroll
                    for (int s = 0; s < KS; ++s) {
                        ldmatrix_x2(bh[s], cht + b_offset(t, s));
                        if (SPLIT) {
                            unsigned bl[2];
                            ldmatrix_x2(bl, clt + b_offset(t, s));
                            multiply_small(acc, a_hi[0][s], a_hi[1][s], a_lo[0][s], a_lo[1][s],
                                           bh[s], bl);
                        }
                    }
#pragma unroll
                    for (int s = 0; s < KS; ++s) multiply_large(acc, a_hi[0][s], a_hi[1][s], bh[s]);
                    push_scores(acc, nst, c0, t);
                }
            } else {
                float acc[NT][2][4] = {}, small[SPLIT ? NT : 1][2][4] = {};
#pragma unroll
                for (int s = 0; s < KS; ++s) {
                    load_a(a_hi[0][0], xhw_at, 0, s);
                    load_a(a_hi[1][0], xhw_at, 1, s);
#pragma unroll
                    for (int e = 0; e < 4; ++e) a_lo[0][0][e] = a_lo[1][0][e] = 0u;
                    if (SPLIT) {
                        load_a(a_lo[0][0], xlw_at, 0, s);
                        load_a(a_lo[1][0], xlw_at, 1, s);
                    }
#pragma unroll
                    for (int t = 0; t < NT; ++t) {  // the small products into their own accumulator
                        unsigned bh[2];
                        ldmatrix_x2(bh, cht + b_offset(t, s));
                        if (SPLIT) {
                            unsigned bl[2];
                            ldmatrix_x2(bl, clt + b_offset(t, s));
                            multiply_small(small[t], a_hi[0][0], a_hi[1][0], a_lo[0][0], a_lo[1][0],
                                           bh, bl);
                        }
                        // the large products an instruction at a time from zero, then added
                        // in float32: the accumulation's error is bounded by each
                        // instruction's own magnitudes, not the row's whole sum
                        // (accumulation.flushed_units: 28 units of 2^-23 at 128 features
                        // against model_units' 192)
                        float part[2][4] = {};
                        multiply_large(part, a_hi[0][0], a_hi[1][0], bh);
#pragma unroll
                        for (int m = 0; m < 2; ++m)
#pragma unroll
                            for (int e = 0; e < 4; ++e) acc[t][m][e] += part[m][e];
                    }
                }
#pragma unroll
                for (int t = 0; t < NT; ++t) {
                    if (SPLIT)
#pragma unroll
                        for (int m = 0; m < 2; ++m)
#pragma unroll
                            for (int e = 0; e < 4; ++e) acc[t][m][e] += small[t][m][e];
                    push_scores(acc[t], nst, c0, t);
                }
            }
            __syncthreads();  // every warp is done with buffer b before it is refilled
        }
#pragma unroll
        for (int m = 0; m < 2; ++m) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                Top2& t = top[m][h];
                if constexpr (keyed) {  // the best key's centre (0 where no score was pushed)
                    const int q = __float_as_int(t.best) & key_mask;
                    t.index = t.best < max_value<float>() ? (q >> 1) * 8 + 2 * member + (q & 1) : 0;
                }
                top2_merge_lanes(t, 1);
                top2_merge_lanes(t, 2);
                const int local = warp * 32 + m * 16 + h * 8 + group;
                const index_t i = row_ids[local];
                const bool active = member == 0 && i < n;
                const bool scaled = row_coef[m][h] == row_coef[m][h];
                // tc-fast decides every row it can scale; the re-check takes the others. The
                // screen's margin adds what the dropped lo parts can move the score.
                const bool screen = SCREENS && c_residual != nullptr;
                // a key below float's normal range has lost its centre (top2_push_key)
                const bool known = !keyed || (__float_as_int(t.best) & 0x7f800000) != 0;
                const bool decided = active && scaled && known
                                     && top2_decides(t, xn[local], (double)cmax_value,
                                                     own_bound, screen ? dropped[local] : 0.0);
                if (SPLIT && *counting) {  // the rows the screen would leave, a warp's at once
                    const bool missed = active && !(scaled && top2_decides(
                        t, xn[local], (double)cmax_value, held_bound, dropped[local]));
                    const unsigned ballot = __ballot_sync(0xffffffffu, missed);
                    if (lane == 0 && ballot != 0u)
                        atomicAdd(screen_misses, (unsigned)__popc(ballot));
                }
                const unsigned slot = finish_row(labels, i, active, decided, t.index,
                                                 old_labels[local], changed, queue_size, queue,
                                                 queue_best);
                if (COPIES && compact != nullptr && slot < cap) {  // listed for the copy below
                    const int at = atomicAdd(&counting[1], 1);
                    copy_slots[at] = slot;
                    copy_rows[at] = local;
                }
                if (SEED && active)
                    seed_bounds(upper, lower, i, decided, t, xn[local], (double)cmax_value,
                                own_bound, screen ? dropped[local] : 0.0);
            }
        }
        if (COPIES && compact != nullptr) {
            // The screen copies the rows it leaves (the first cap) into compact, column-major
            // like XT, a thread a feature: the split kernel then stages them as it stages every
            // row, 16 contiguous bytes a copy, where reading them from XT took a 32-byte sector
            // a value (the split kernel's pass over them 401 -> 207 us at 1M x 128, k = 1024,
            // the same number of rows but contiguous, under ncu on the H200: record
            // split-indirect-probe-h200-2026-11-28-9b6384c.txt). Here the rows were staged a
            // tile ago, in L2. The loads of four rows go out before their stores. A bound
            // call 1.44 -> 1.39 ms there, 4 % at 64 and 100 features, 10M x 32 (no copy) and
            // float64 as before (tc-source-ab-screen-copy-h200-2026-11-28-3f991d6.json).
            __syncthreads();  // the list complete (the staging area is free in the epilogue)
            const int listed = counting[1];
            if ((int)threadIdx.x < d) {
                const T* column = XT + (index_t)threadIdx.x * n;
                T* target = compact + (index_t)threadIdx.x * cap;
                for (int q = 0; q < listed; q += 4) {
                    T v[4];
#pragma unroll
                    for (int u = 0; u < 4; ++u)
                        if (q + u < listed) v[u] = column[row_ids[copy_rows[q + u]]];
#pragma unroll
                    for (int u = 0; u < 4; ++u)
                        if (q + u < listed) target[copy_slots[q + u]] = v[u];
                }
            }
        }
        __syncthreads();  // the epilogue's shared values read before the next tile's staging
    }
}
