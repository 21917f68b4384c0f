// The whole device Lloyd loop in one cooperative launch, for small problems (d <= DMAX, all
// centres and a block's partial sums in shared memory), where an iteration's work (~10 us)
// costs less than launching it. X is column-major: feature j of point i at XT[j * n + i].
//
// Iteration `it` (parity p = it & 1) is the device loop's iteration (gpumine.kmeans.lloyd):
//   E-step + M-step, per block: the current centres into shared memory (zero-padded to
//     DMAX features, as assign_registers), each point's label by assign_registers'
//     arithmetic (sum (x - c)^2 in T, features ascending, ties to the lowest index), the
//     changed labels counted, and the point added into the block's shared sums (T) as
//     update_atomic_shared does; the block's sums flushed into sums[p] / weights[p]
//     (double atomics);
//   grid barrier;
//   averaging, distributed over the grid: finish_centers' arithmetic (sums * (1 / w); an
//     empty cluster takes the heaviest cluster's centre), the squared shift and the empty
//     count per block into block_status; the other parity's sums and counter zeroed for the
//     next iteration;
//   grid barrier;
//   every block adds the blocks' shifts in block order (the same total everywhere) and
//     takes the stopping rule: an empty cluster (the host relocates, then relaunches), no
//     label changed (strict convergence), shift <= tol, or max_iter reached.
// status: [0] iterations done (the last one's index + 1), [1] its shift, [2] its empty
// clusters, [3] its changed labels; the newest centres are centers[(it + 1) & 1].
#include <cooperative_groups.h>
#include "common.cuh"

namespace cg = cooperative_groups;

template <typename T, int DMAX, int BLOCK>
__global__ void __launch_bounds__(BLOCK)
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
           double* __restrict__ status)          // OUT (4)
{
    cg::grid_group grid = cg::this_grid();
    constexpr int kWarps = BLOCK / 32;
    extern __shared__ __align__(16) unsigned char loop_shared[];
    T* tile = reinterpret_cast<T*>(loop_shared);           // k * DMAX centres
    T* acc = tile + (index_t)k * DMAX;                      // k * d sums, then k weights
    T* acc_weights = acc + (index_t)k * d;
    __shared__ double reduce_value[kWarps];
    __shared__ unsigned long long reduce_count[kWarps];
    __shared__ int heaviest;
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
    const index_t thread = (index_t)blockIdx.x * BLOCK + threadIdx.x;
    const index_t threads = (index_t)gridDim.x * BLOCK;

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
        for (int t = threadIdx.x; t < k * (d + 1); t += BLOCK) acc[t] = T(0);
        __syncthreads();
        unsigned long long moved = 0;
        for (index_t i = thread; i < n; i += threads) {
            T x[DMAX];
#pragma unroll
            for (int j = 0; j < DMAX; ++j) x[j] = j < d ? XT[(index_t)j * n + i] : T(0);
            T best = max_value<T>();
            int best_index = 0;
            for (int c = 0; c < k; ++c) {
                T distance = T(0);
#pragma unroll
                for (int j = 0; j < DMAX; ++j) {
                    const T diff = x[j] - tile[c * DMAX + j];
                    distance += diff * diff;
                }
                if (distance < best) {
                    best = distance;
                    best_index = c;
                }
            }
            moved += labels[i] != best_index ? 1ull : 0ull;
            labels[i] = best_index;
            const T w = sample_weight[i];
            atomicAdd(&acc_weights[best_index], w);
#pragma unroll
            for (int j = 0; j < DMAX; ++j)  // unrolled: x stays in registers
                if (j < d) atomicAdd(&acc[best_index * d + j], x[j] * w);
        }
        for (int offset = 16; offset > 0; offset >>= 1)
            moved += __shfl_down_sync(0xffffffffu, moved, offset);
        if (lane == 0 && moved) atomicAdd(&changed[p], moved);
        __syncthreads();
        for (int t = threadIdx.x; t < k * (d + 1); t += BLOCK) {
            const double value = (double)acc[t];
            if (value != 0.0) {
                if (t < k * d) atomicAdd(&S[t], value);
                else atomicAdd(&W[t - k * d], value);
            }
        }
        grid.sync();

        // -- averaging, shift and empty clusters, spread over the grid -------------------
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
        unsigned long long empty = 0;
        for (index_t e = thread; e < (index_t)k * d; e += threads) {
            const int c = (int)(e / d), j = (int)(e - (index_t)c * d);
            const double w = __ldcg(W + c);
            const T value = w > 0.0 ? (T)(__ldcg(S + e) * (1.0 / w))
                                    : (T)(__ldcg(S + (index_t)h * d + j) * reciprocal_h);
            const double diff = (double)value - (double)__ldcg(current + e);
            shift += diff * diff;
            next[e] = value;
        }
        for (index_t c = thread; c < k; c += threads) empty += __ldcg(W + c) > 0.0 ? 0 : 1;
        // the other parity's accumulators, for the next iteration (read last iteration)
        for (index_t e = thread; e < (index_t)k * d; e += threads)
            sums[(index_t)(p ^ 1) * k * d + e] = 0.0;
        for (index_t c = thread; c < k; c += threads) weights[(index_t)(p ^ 1) * k + c] = 0.0;
        if (thread == 0) changed[p ^ 1] = 0ull;
        for (int offset = 16; offset > 0; offset >>= 1) {
            shift += __shfl_down_sync(0xffffffffu, shift, offset);
            empty += __shfl_down_sync(0xffffffffu, empty, offset);
        }
        if (lane == 0) { reduce_value[warp] = shift; reduce_count[warp] = empty; }
        __syncthreads();
        if (threadIdx.x == 0) {
            double block_shift = 0.0, block_empty = 0.0;
            for (int w = 0; w < kWarps; ++w) {
                block_shift += reduce_value[w];
                block_empty += (double)reduce_count[w];
            }
            block_status[(index_t)blockIdx.x * 2] = block_shift;
            block_status[(index_t)blockIdx.x * 2 + 1] = block_empty;
        }
        grid.sync();

        // -- the stopping rule, taken by every block from the same numbers ---------------
        double total_shift = 0.0, total_empty = 0.0;
        for (int b = 0; b < (int)gridDim.x; ++b) {  // block order: the same sum everywhere
            total_shift += __ldcg(block_status + (index_t)b * 2);
            total_empty += __ldcg(block_status + (index_t)b * 2 + 1);
        }
        const unsigned long long n_changed = __ldcg(changed + p);
        const bool stop = total_empty > 0.0 || n_changed == 0ull || total_shift <= tol
                          || it + 1 == max_iter;
        if (stop) {
            if (thread == 0) {
                status[0] = (double)(it + 1);
                status[1] = total_shift;
                status[2] = total_empty;
                status[3] = (double)n_changed;
            }
            return;
        }
        __syncthreads();  // tile and acc are rewritten by the next iteration
    }
}
