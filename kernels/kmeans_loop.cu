// The whole device Lloyd loop in one cooperative launch, for small problems (d <= DMAX, all
// centres and a block's partial sums in shared memory), where an iteration's work (~10 us)
// costs less than launching it. X is column-major: feature j of point i at XT[j * n + i].
//
// Iteration `it` (parity p = it & 1) is the device loop's iteration (gpumine.kmeans.lloyd):
//   E-step + M-step, per block: the current centres into shared memory (zero-padded to
//     DMAX features, d rounded up to even: the padding's zeros add exact zeros, so the sums
//     equal assign_registers', whose DMAX is coarser), each point's label by assign_registers'
//     arithmetic (sum (x - c)^2 in T, features ascending, ties to the lowest index), the
//     changed labels counted, and the point added into the block's shared sums (T) as
//     update_atomic_shared does; the block's sums flushed into sums[p] / weights[p]
//     (double atomics);
//   grid barrier;
//   relocation of empty clusters (rare; at most kMaxRelocations of them, else the kernel
//     stops and the host relocates, as the launch loop does): the farthest points picked
//     one per round by two grid-wide reductions, in relocate_empty_clusters' order, then
//     relocate_empty's moves by one warp;
//   averaging, distributed over the grid: finish_centers' arithmetic (sums * (1 / w); an
//     empty cluster takes the heaviest cluster's centre), the squared shift per block into
//     block_status; the other parity's sums and counter zeroed for the next iteration;
//   grid barrier;
//   every block adds the blocks' shifts in a fixed order (the same total everywhere) and
//     takes the stopping rule: too many empty clusters (the host relocates, then
//     relaunches), no label changed (strict convergence), shift <= tol, or max_iter reached.
// After the last iteration (not after a stop for the host's relocation) the final pass
// runs: the E-step against the newest centres (skipped on strict convergence, whose labels
// are final), the inertia (inertia_partial's arithmetic, blocks added in a fixed order) and
// the number of clusters that hold a point.
// status: [0] iterations done (the last one's index + 1), [1] its shift, [2] the empty
// clusters left for the host to relocate (0 unless it stopped for that), [3] its changed
// labels, [4] the inertia and [5] the clusters holding a point (when [6] = 1: the final pass
// ran); the newest centres are centers[(it + 1) & 1].
#include <cooperative_groups.h>
#include "common.cuh"
#include "kmeans_direct.cuh"
#include "kmeans_relocate.cuh"

namespace cg = cooperative_groups;

// Empty clusters relocated on the device per iteration at most; more stop the kernel.
constexpr int kMaxRelocations = 32;

namespace loop {

// Point i's features, zero-padded to DMAX (registers).
template <typename T, int DMAX>
__device__ __forceinline__ void load_point(const T* __restrict__ XT, index_t n, int d, index_t i,
                                           T (&x)[DMAX]) {
#pragma unroll
    for (int j = 0; j < DMAX; ++j) x[j] = j < d ? XT[(index_t)j * n + i] : T(0);
}

// assign_registers' argmin over the padded centres in shared memory: sum (x - c)^2 in T,
// features ascending, ties to the lowest index. Eight centres at a time: their eight sums
// are independent chains in flight together (one centre's sum is a chain of DMAX dependent
// adds), each computed as alone and compared in index order, so the result is the same
// (measured: 10 Corel-size iterations 0.385 -> 0.360 ms on blobs, 0.340 -> 0.306 on normal
// data; session-scratch-2026-11-24 record).
//
// With TPP threads per point (a group of TPP consecutive lanes holding the same point), lane r
// of the group walks centres r, r + TPP, r + 2 TPP, ... and the group combines its minima by
// (distance, index): the lowest index among the smallest distances, as the serial walk finds,
// from the same per-centre sums. It pays where one thread a point leaves most SMs idle (5,000
// x 8, k = 256: 20.9 -> 14.6 us an iteration at TPP 4); where one thread a point already
// spans half the SMs (Corel size: 25.3 -> 29.9 us) or at d = 32 it is slower (record
// loop-tpp-2026-11-24-a3f5be5.json; gpu._fused_tpp chooses).
template <typename T, int DMAX, int TPP>
__device__ __forceinline__ int nearest(const T (&x)[DMAX], const T* tile, int k, int r) {
    constexpr int kTogether = 8;
    T best = max_value<T>();
    int best_index = r;
    int c = r;
    for (; c + (kTogether - 1) * TPP < k; c += kTogether * TPP) {
        T distance[kTogether];
#pragma unroll
        for (int u = 0; u < kTogether; ++u)
            distance[u] = padded_squared_distance<T, DMAX>(x, tile + (c + u * TPP) * DMAX);
#pragma unroll
        for (int u = 0; u < kTogether; ++u) {
            if (distance[u] < best) {
                best = distance[u];
                best_index = c + u * TPP;
            }
        }
    }
    for (; c < k; c += TPP) {
        const T distance = padded_squared_distance<T, DMAX>(x, tile + c * DMAX);
        if (distance < best) {
            best = distance;
            best_index = c;
        }
    }
    group_argmin<TPP>(best, best_index);  // the group's lexicographic min
    return best_index;
}

// point_distances' arithmetic: point i's squared distance to its centre, in T.
template <typename T>
__device__ __forceinline__ T distance_to_center(const T* __restrict__ XT, index_t n, int d,
                                                index_t i, const T* center) {
    T distance = T(0);
    for (int j = 0; j < d; ++j) {
        const T diff = XT[(index_t)j * n + i] - center[j];
        distance += diff * diff;
    }
    return distance;
}

// op over the blocks' values block_status[b * 2 + slot] in a fixed order (lane l takes
// blocks l, l + 32, ..., then a shuffle tree): the same result in every warp of every block,
// one L2 round trip rather than one per block. Every lane of the warp must call it.
template <typename Op>
__device__ __forceinline__ double grid_reduce(const double* block_status, int slot, Op op) {
    double value = Op::identity();
    for (int b = threadIdx.x & 31; b < (int)gridDim.x; b += 32)
        value = op(value, __ldcg(block_status + (index_t)b * 2 + slot));
    for (int offset = 16; offset > 0; offset >>= 1)
        value = op(value, __shfl_down_sync(0xffffffffu, value, offset));
    return __shfl_sync(0xffffffffu, value, 0);
}

// The relocation of n_empty (1..kMaxRelocations) empty clusters, by every block alike (it
// synchronizes the grid): the n_empty points farthest from their centres (point_distances'
// values; the current centres in `tile`, rows of `stride`), one per round: n_empty == 1
// takes the first maximum (argmax); more take them largest first, equal distances highest
// index first (the reversed argsort). Then the host's moves (move_to_empty_clusters) by
// block 0's first warp. Out of line: its registers do not count against the loop's.
template <typename T, int BLOCK>
__device__ __noinline__ void relocate(cg::grid_group& grid, const T* __restrict__ XT,
                                      const T* __restrict__ sample_weight, index_t n, int d,
                                      int k, const int* labels, const T* tile, int stride,
                                      double* S, double* W, int n_empty, double* block_status,
                                      double* reduce_value, long long* picked, int* empty_ids) {
    const int warp = threadIdx.x / 32;
    const index_t thread = (index_t)blockIdx.x * BLOCK + threadIdx.x;
    const index_t threads = (index_t)gridDim.x * BLOCK;
    const bool first_max = n_empty == 1;
    double last_value = 0.0, last_index = 0.0;
    bool moves = true;
    for (int r = 0; r < n_empty; ++r) {
        double value = -1.0;
        for (index_t i = thread; i < n; i += threads) {
            const T v = distance_to_center<T>(XT, n, d, i,
                                              tile + (index_t)__ldcg(labels + i) * stride);
            const bool open = r == 0 || (double)v < last_value
                              || ((double)v == last_value && (double)i < last_index);
            if (open && (double)v > value) value = (double)v;
        }
        value = block_all_reduce<BLOCK>(value, reduce_value, Max());
        if (threadIdx.x == 0) block_status[(index_t)blockIdx.x * 2] = value;
        grid.sync();
        const double largest = grid_reduce(block_status, 0, Max());
        if (r == 0 && largest == 0.0) {  // every point on its centre: nothing moves
            moves = false;
            break;
        }
        double index = first_max ? (double)n : -1.0;
        for (index_t i = thread; i < n; i += threads) {
            const T v = distance_to_center<T>(XT, n, d, i,
                                              tile + (index_t)__ldcg(labels + i) * stride);
            const bool open = r == 0 || (double)v < last_value
                              || ((double)v == last_value && (double)i < last_index);
            if (open && (double)v == largest)
                index = first_max ? fmin(index, (double)i) : fmax(index, (double)i);
        }
        if (first_max) {
            index = block_all_reduce<BLOCK>(index, reduce_value, Min());
        } else {
            index = block_all_reduce<BLOCK>(index, reduce_value, Max());
        }
        if (threadIdx.x == 0) block_status[(index_t)blockIdx.x * 2 + 1] = index;
        grid.sync();
        last_index = first_max ? grid_reduce(block_status, 1, Min())
                               : grid_reduce(block_status, 1, Max());
        last_value = largest;
        if (threadIdx.x == 0) picked[r] = (long long)last_index;
    }
    if (moves && blockIdx.x == 0 && warp == 0)
        move_to_empty_clusters<T>(XT, sample_weight, labels, n, d, k, picked, n_empty, empty_ids,
                                  S, W);
    grid.sync();
}

}  // namespace loop

// TPP threads per point (a power of two up to 32; see nearest()). With one thread a point,
// one block per SM is all the loop needs and min blocks 1 lets ptxas keep nearest()'s eight
// sums without spilling; with more, the grid needs two blocks an SM.
template <typename T, int DMAX, int BLOCK, int TPP>
__global__ void __launch_bounds__(BLOCK, TPP == 1 ? 1 : 2)
lloyd_loop(const T* __restrict__ XT,             // IN  (d, n) points, centred
           const T* __restrict__ sample_weight,  // IN  (n)
           index_t n, int d, int k,              // IN  d <= DMAX
           int first_iter, int max_iter,         // IN  iterations first_iter .. max_iter - 1
           double tol,                           // IN  scaled tolerance
           T* __restrict__ centers,              // INOUT (2, k, d): centers[first_iter & 1] in
           int* __restrict__ labels,             // INOUT (n) previous labels in
           double* __restrict__ sums,            // INOUT (2, k, d) zero on entry
           double* __restrict__ weights,         // INOUT (2, k) zero on entry
           unsigned long long* __restrict__ changed,  // INOUT (2) zero on entry
           double* __restrict__ block_status,    // OUT (gridDim.x, 2) scratch
           double* __restrict__ status)          // OUT (7)
{
    cg::grid_group grid = cg::this_grid();
    constexpr int kWarps = BLOCK / 32;
    extern __shared__ __align__(16) unsigned char loop_shared[];
    T* tile = reinterpret_cast<T*>(loop_shared);           // k * DMAX centres
    const int stride = odd_stride(d);
    T* acc = tile + (index_t)k * DMAX;                      // k rows of stride sums,
    T* acc_weights = acc + (index_t)k * stride;             // then k weights
    __shared__ double reduce_value[kWarps];
    __shared__ unsigned long long reduce_count[kWarps];
    __shared__ int heaviest;
    __shared__ long long picked[kMaxRelocations];  // block 0: the relocated points
    __shared__ int empty_ids[kMaxRelocations];
    static_assert(TPP >= 1 && TPP <= 32 && (TPP & (TPP - 1)) == 0, "TPP: a power of two <= 32");
    const int lane = threadIdx.x & 31;
    const index_t thread = (index_t)blockIdx.x * BLOCK + threadIdx.x;
    const index_t threads = (index_t)gridDim.x * BLOCK;
    // point groups: every lane of a warp runs the same number of rounds (the shuffles in
    // nearest() need all 32), a group past n computes on point 0 and writes nothing
    const int r = threadIdx.x % TPP;
    const index_t group = thread / TPP, groups = threads / TPP;

    for (int it = first_iter; it < max_iter; ++it) {
        const int p = it & 1;
        const T* current = centers + (index_t)p * k * d;
        T* next = centers + (index_t)(p ^ 1) * k * d;
        double* S = sums + (index_t)p * k * d;
        double* W = weights + (index_t)p * k;

        // -- E-step and the block's share of the M-step ------------------------------
        for (int t = threadIdx.x; t < k * DMAX; t += BLOCK) {
            const int c = t / DMAX, j = t - c * DMAX;
            tile[t] = j < d ? __ldcg(current + (index_t)c * d + j) : T(0);
        }
        for (int t = threadIdx.x; t < k * (stride + 1); t += BLOCK) acc[t] = T(0);
        __syncthreads();
        unsigned long long moved = 0;
        for (index_t start = 0; start < n; start += groups) {
            const index_t i = start + group;
            const bool active = i < n;
            T x[DMAX];
            loop::load_point<T, DMAX>(XT, n, d, active ? i : 0, x);
            const int best_index = loop::nearest<T, DMAX, TPP>(x, tile, k, r);
            if (!active) continue;
            const T w = sample_weight[i];
            if (r == 0) {
                moved += labels[i] != best_index ? 1ull : 0ull;
                labels[i] = best_index;
                atomicAdd(&acc_weights[best_index], w);
            }
#pragma unroll
            for (int j = 0; j < DMAX; ++j)  // unrolled: x stays in registers; lane r adds j = r mod TPP
                if (j < d && j % TPP == r) atomicAdd(&acc[best_index * stride + j], x[j] * w);
        }
        for (int offset = 16; offset > 0; offset >>= 1)
            moved += __shfl_down_sync(0xffffffffu, moved, offset);
        if (lane == 0 && moved) atomicAdd(&changed[p], moved);
        __syncthreads();
        for (int t = threadIdx.x; t < k * (d + 1); t += BLOCK) {  // the (k, d) + k layout
            const int c = t / d;
            const double value = (double)(t < k * d ? acc[c * stride + (t - c * d)]
                                                    : acc_weights[t - k * d]);
            if (value != 0.0) {
                if (t < k * d) atomicAdd(&S[t], value);
                else atomicAdd(&W[t - k * d], value);
            }
        }
        grid.sync();

        // -- empty clusters: counted by every block alike, relocated when few -------------
        unsigned long long n_empty = 0;
        for (int c = threadIdx.x; c < k; c += BLOCK) n_empty += __ldcg(W + c) > 0.0 ? 0 : 1;
        n_empty = block_all_reduce<BLOCK>(n_empty, reduce_count, Add());
        const bool host_relocates = n_empty > (unsigned long long)kMaxRelocations;
        if (n_empty > 0 && !host_relocates)
            loop::relocate<T, BLOCK>(grid, XT, sample_weight, n, d, k, labels, tile, DMAX, S, W,
                                     (int)n_empty, block_status, reduce_value, picked, empty_ids);

        // -- averaging and shift, spread over the grid -----------------------------------
        if (threadIdx.x < 32) {  // the heaviest cluster (the first maximum), one warp
            double best = -1.0;
            int best_index = 0;
            for (int c = lane; c < k; c += 32) {
                const double w = __ldcg(W + c);
                if (w > best) { best = w; best_index = c; }
            }
            for (int offset = 16; offset > 0; offset >>= 1) {
                const double other = __shfl_down_sync(0xffffffffu, best, offset);
                const int other_index = __shfl_down_sync(0xffffffffu, best_index, offset);
                if (other > best || (other == best && other_index < best_index)) {
                    best = other;
                    best_index = other_index;
                }
            }
            if (lane == 0) heaviest = best_index;
        }
        __syncthreads();
        const int h = heaviest;
        const double w_h = __ldcg(W + h);
        const double reciprocal_h = w_h > 0.0 ? 1.0 / w_h : 1.0;
        double shift = 0.0;
        for (index_t e = thread; e < (index_t)k * d; e += threads) {
            const int c = (int)(e / d), j = (int)(e - (index_t)c * d);
            const double w = __ldcg(W + c);
            const T value = w > 0.0 ? (T)(__ldcg(S + e) * (1.0 / w))
                                    : (T)(__ldcg(S + (index_t)h * d + j) * reciprocal_h);
            const double diff = (double)value - (double)__ldcg(current + e);
            shift += diff * diff;
            next[e] = value;
        }
        // the other parity's accumulators, for the next iteration (read last iteration)
        for (index_t e = thread; e < (index_t)k * d; e += threads)
            sums[(index_t)(p ^ 1) * k * d + e] = 0.0;
        for (index_t c = thread; c < k; c += threads) weights[(index_t)(p ^ 1) * k + c] = 0.0;
        if (thread == 0) changed[p ^ 1] = 0ull;
        shift = block_all_reduce<BLOCK>(shift, reduce_value, Add());
        if (threadIdx.x == 0) block_status[(index_t)blockIdx.x * 2] = shift;
        grid.sync();

        // -- the stopping rule, taken by every block from the same numbers ---------------
        const double total_shift = loop::grid_reduce(block_status, 0, Add());
        const unsigned long long n_changed = __ldcg(changed + p);
        const bool stop = host_relocates || n_changed == 0ull || total_shift <= tol
                          || it + 1 == max_iter;
        if (!stop) {
            __syncthreads();  // tile and acc are rewritten by the next iteration
            continue;
        }
        double inertia = 0.0, holding = 0.0;
        if (!host_relocates) {
            // -- the final pass: labels for the newest centres, inertia, clusters used ----
            __syncthreads();
            int* counts = reinterpret_cast<int*>(acc);  // k counters in the sums' place
            for (int t = threadIdx.x; t < k * DMAX; t += BLOCK) {
                const int c = t / DMAX, j = t - c * DMAX;
                tile[t] = j < d ? __ldcg(next + (index_t)c * d + j) : T(0);
            }
            for (int c = threadIdx.x; c < k; c += BLOCK) counts[c] = 0;
            __syncthreads();
            double total = 0.0;
            for (index_t start = 0; start < n; start += groups) {
                const index_t i = start + group;
                const bool active = i < n;
                T x[DMAX];
                loop::load_point<T, DMAX>(XT, n, d, active ? i : 0, x);
                int label = 0;
                if (n_changed != 0ull) {  // strict convergence: the labels are final
                    label = loop::nearest<T, DMAX, TPP>(x, tile, k, r);
                    if (active && r == 0) labels[i] = label;
                } else if (active) {
                    label = labels[i];
                }
                if (!active || r != 0) continue;
                double distance = 0.0;  // the padding adds exact zeros
#pragma unroll
                for (int j = 0; j < DMAX; ++j) {
                    const double diff = (double)x[j] - (double)tile[label * DMAX + j];
                    distance += diff * diff;
                }
                total += (double)sample_weight[i] * distance;
                atomicAdd(&counts[label], 1);
            }
            total = block_all_reduce<BLOCK>(total, reduce_value, Add());
            if (threadIdx.x == 0) block_status[(index_t)blockIdx.x * 2 + 1] = total;
            // the counts go into the other parity's weights, zeroed above and unused now
            double* used = weights + (index_t)(p ^ 1) * k;
            for (int c = threadIdx.x; c < k; c += BLOCK)
                if (counts[c]) atomicAdd(&used[c], 1.0);
            grid.sync();
            if (blockIdx.x == 0) {
                inertia = loop::grid_reduce(block_status, 1, Add());
                double local = 0.0;
                for (int c = threadIdx.x; c < k; c += BLOCK) local += __ldcg(used + c) > 0.0;
                holding = block_all_reduce<BLOCK>(local, reduce_value, Add());
            }
        }
        if (thread == 0) {
            status[0] = (double)(it + 1);
            status[1] = total_shift;
            status[2] = host_relocates ? (double)n_empty : 0.0;
            status[3] = (double)n_changed;
            status[4] = inertia;
            status[5] = holding;
            status[6] = host_relocates ? 0.0 : 1.0;
        }
        return;
    }
}
