// The per-iteration and per-fit bookkeeping of the device Lloyd loop, so that an iteration
// reads back one small status record instead of running a dozen array operations.
#include "common.cuh"

// M-step end, one block: new centres sums / weights (multiplied by the reciprocal, as the
// CPU reference), the total squared centre shift, the number of empty clusters and the
// changed-labels count of the E-step, written to `status` for the one readback:
//   status[0] = sum over clusters and features of (new - old)^2   (double)
//   status[1] = clusters of zero weight                            (before relocation)
//   status[2] = labels changed in this iteration (from *changed, which is reset to 0)
// A cluster still empty is placed on the centre of the heaviest cluster (the first on ties),
// as scikit-learn does. Deterministic: fixed-order block reductions, no atomics.
template <typename C, int BLOCK>
__global__ void __launch_bounds__(BLOCK)
finish_centers(const double* __restrict__ sums,       // IN  (k, d)
               const double* __restrict__ weights,    // IN  (k)
               const C* __restrict__ centers_old,     // IN  (k, d)
               int k, int d,                          // IN
               C* __restrict__ centers_new,           // OUT (k, d)
               unsigned long long* changed,           // INOUT (1) read, then zeroed; may be null
               double* __restrict__ status)           // OUT (3)
{
    __shared__ double shared_value[BLOCK];
    __shared__ int shared_index[BLOCK];
    __shared__ int heaviest;
    // Heaviest cluster: the first maximum of the weights.
    double best = -1.0;
    int best_index = 0;
    int empty = 0;
    for (int c = threadIdx.x; c < k; c += BLOCK) {
        const double w = weights[c];
        if (w > best) { best = w; best_index = c; }
        empty += w > 0.0 ? 0 : 1;
    }
    shared_value[threadIdx.x] = best;
    shared_index[threadIdx.x] = best_index;
    __syncthreads();
    for (int half = BLOCK / 2; half > 0; half >>= 1) {
        if (threadIdx.x < half) {
            const double other = shared_value[threadIdx.x + half];
            const int other_index = shared_index[threadIdx.x + half];
            if (other > shared_value[threadIdx.x] ||
                (other == shared_value[threadIdx.x] && other_index < shared_index[threadIdx.x])) {
                shared_value[threadIdx.x] = other;
                shared_index[threadIdx.x] = other_index;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) heaviest = shared_index[0];
    __syncthreads();
    const int h = heaviest;
    const double reciprocal_h = weights[h] > 0.0 ? 1.0 / weights[h] : 1.0;
    double shift = 0.0;
    for (index_t e = threadIdx.x; e < (index_t)k * d; e += BLOCK) {
        const int c = (int)(e / d), j = (int)(e - (index_t)c * d);
        const double w = weights[c];
        const C value = w > 0.0 ? (C)(sums[e] * (1.0 / w))
                                : (C)(sums[(index_t)h * d + j] * reciprocal_h);
        const double diff = (double)value - (double)centers_old[e];
        shift += diff * diff;
        centers_new[e] = value;
    }
    // Block sums of the shift and the empty count, in a fixed order.
    __syncthreads();
    shared_value[threadIdx.x] = shift;
    shared_index[threadIdx.x] = empty;
    __syncthreads();
    for (int half = BLOCK / 2; half > 0; half >>= 1) {
        if (threadIdx.x < half) {
            shared_value[threadIdx.x] += shared_value[threadIdx.x + half];
            shared_index[threadIdx.x] += shared_index[threadIdx.x + half];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        status[0] = shared_value[0];
        status[1] = (double)shared_index[0];
        if (changed != nullptr) {
            status[2] = (double)*changed;
            *changed = 0ull;
        }
    }
}

// Inertia, directly: per block the sum of w_i * sum_j (x_ij - c_{l_i, j})^2 in double over a
// grid-stride share of the points, written to partial[blockIdx.x] (added in a fixed order by
// the caller: deterministic).
template <typename T, typename C, int BLOCK>
__global__ void __launch_bounds__(BLOCK)
inertia_partial(const T* __restrict__ XT,             // IN  (d, n)
                const T* __restrict__ sample_weight,  // IN  (n)
                const C* __restrict__ centers,        // IN  (k, d)
                const int* __restrict__ labels,       // IN  (n)
                index_t n, int d,                     // IN
                double* __restrict__ partial)         // OUT (gridDim.x)
{
    __shared__ double shared_sum[BLOCK];
    double total = 0.0;
    for (index_t i = (index_t)blockIdx.x * BLOCK + threadIdx.x; i < n;
         i += (index_t)gridDim.x * BLOCK) {
        const C* center = centers + (index_t)labels[i] * d;
        double distance = 0.0;
        for (int j = 0; j < d; ++j) {
            const double diff = (double)XT[(index_t)j * n + i] - (double)center[j];
            distance += diff * diff;
        }
        total += (double)sample_weight[i] * distance;
    }
    shared_sum[threadIdx.x] = total;
    __syncthreads();
    for (int half = BLOCK / 2; half > 0; half >>= 1) {
        if (threadIdx.x < half) shared_sum[threadIdx.x] += shared_sum[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = shared_sum[0];
}
