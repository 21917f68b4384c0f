// The per-iteration and per-fit bookkeeping of the device Lloyd loop, so that an iteration
// reads back one small status record instead of running a dozen array operations.
#include "common.cuh"
#include "kmeans_relocate.cuh"

// M-step end: new centres sums / weights (multiplied by the reciprocal, as the CPU
// reference), the total squared centre shift, the number of empty clusters and the
// changed-labels count of the E-step, written to `status` for the one readback:
//   status[0] = sum over clusters and features of (new - old)^2   (double)
//   status[1] = clusters of zero weight                            (before relocation)
//   status[2] = labels changed in this iteration (from *changed, which is reset to 0)
// A cluster still empty is placed on the centre of the heaviest cluster (the first on ties),
// as scikit-learn does. A grid strides over the k * d centre values (one block took 0.33 ms
// at k = 1024, d = 128 on the H100, 7 % of a tc-exact iteration); every block finds the
// heaviest cluster and counts the empty ones itself, writes its share of the shift to
// partial[blockIdx.x], and the block that finishes last (a ticket taken after a fence) adds
// the shares in block order and writes the status, then zeroes the ticket for the next
// launch (a captured graph's too). Deterministic: fixed-order reductions, the one atomic
// only elects the last block.
template <typename C, int BLOCK>
__global__ void __launch_bounds__(BLOCK)
finish_centers(const double* __restrict__ sums,       // IN  (k, d)
               const double* __restrict__ weights,    // IN  (k)
               const C* __restrict__ centers_old,     // IN  (k, d)
               int k, int d,                          // IN
               C* __restrict__ centers_new,           // OUT (k, d)
               unsigned long long* changed,           // INOUT (1) read, then zeroed; may be null
               double* __restrict__ status,           // OUT (3)
               double* __restrict__ partial,          // OUT (gridDim.x) the blocks' shifts
               unsigned* __restrict__ ticket)         // INOUT (1) 0 before, 0 after
{
    constexpr int kWarps = BLOCK / kWarpSize;
    __shared__ ValueIndex reduce_pair[kWarps];
    __shared__ double reduce_value[kWarps];
    __shared__ int reduce_count[kWarps];
    __shared__ bool last;
    // Heaviest cluster: the first maximum of the weights.
    ValueIndex heaviest = {-1.0, 0};
    int empty = 0;
    for (int c = threadIdx.x; c < k; c += BLOCK) {
        const double w = weights[c];
        if (w > heaviest.value) heaviest = {w, c};
        empty += w > 0.0 ? 0 : 1;
    }
    const int h = block_all_reduce<BLOCK>(heaviest, reduce_pair, ArgMax()).index;
    const double reciprocal_h = weights[h] > 0.0 ? 1.0 / weights[h] : 1.0;
    double shift = 0.0;
    for (index_t e = (index_t)blockIdx.x * BLOCK + threadIdx.x; e < (index_t)k * d;
         e += (index_t)gridDim.x * BLOCK) {
        const int c = (int)(e / d), j = (int)(e - (index_t)c * d);
        const double w = weights[c];
        const C value = w > 0.0 ? (C)(sums[e] * (1.0 / w))
                                : (C)(sums[(index_t)h * d + j] * reciprocal_h);
        const double diff = (double)value - (double)centers_old[e];
        shift += diff * diff;
        centers_new[e] = value;
    }
    shift = block_all_reduce<BLOCK>(shift, reduce_value, Add());
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = shift;
        __threadfence();  // the share is visible before the ticket is taken
        last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;  // uniform across the block
    double total = 0.0;
    for (int b = threadIdx.x; b < (int)gridDim.x; b += BLOCK) total += __ldcg(partial + b);
    total = block_all_reduce<BLOCK>(total, reduce_value, Add());
    empty = block_all_reduce<BLOCK>(empty, reduce_count, Add());
    if (threadIdx.x == 0) {
        status[0] = total;
        status[1] = (double)empty;
        if (changed != nullptr) {
            status[2] = (double)*changed;
            *changed = 0ull;
        }
        *ticket = 0u;
    }
}

// Inertia, directly: per block the sum of w_i * sum_j (x_ij - c_{l_i, j})^2 in double over a
// grid-stride share of the points, written to partial[blockIdx.x] (added in a fixed order by
// the caller: deterministic). A centre's values are read 16 bytes at a time where its row
// allows (d a multiple of 16 / sizeof(C), the centres 16-byte aligned): each thread's centre
// is another row, so a warp's scalar load of one feature took 32 sectors for 32 values; the
// sums are added in the same order either way (the same bits).
template <typename C> struct Vector16;
template <> struct Vector16<float> { using type = float4; static constexpr int size = 4; };
template <> struct Vector16<double> { using type = double2; static constexpr int size = 2; };

template <typename C>
__device__ __forceinline__ C vector_part(const typename Vector16<C>::type& v, int q) {
    const C* parts = reinterpret_cast<const C*>(&v);
    return parts[q];
}

template <typename T, typename C, int BLOCK>
__global__ void __launch_bounds__(BLOCK)
inertia_partial(const T* __restrict__ XT,             // IN  (d, n)
                const T* __restrict__ sample_weight,  // IN  (n)
                const C* __restrict__ centers,        // IN  (k, d)
                const int* __restrict__ labels,       // IN  (n)
                index_t n, int d,                     // IN
                double* __restrict__ partial)         // OUT (gridDim.x)
{
    __shared__ double reduce_value[BLOCK / kWarpSize];
    using Vec = typename Vector16<C>::type;
    constexpr int V = Vector16<C>::size;
    const bool vectors = d % V == 0 && (reinterpret_cast<size_t>(centers) & 15) == 0;
    double total = 0.0;
    for (index_t i = (index_t)blockIdx.x * BLOCK + threadIdx.x; i < n;
         i += (index_t)gridDim.x * BLOCK) {
        const C* center = centers + (index_t)labels[i] * d;
        double distance = 0.0;
        int j = 0;
        if (vectors) {
            for (; j < d; j += V) {
                const Vec c = *reinterpret_cast<const Vec*>(center + j);
                T x[V];
#pragma unroll
                for (int q = 0; q < V; ++q) x[q] = XT[(index_t)(j + q) * n + i];
#pragma unroll
                for (int q = 0; q < V; ++q) {
                    const double diff = (double)x[q] - (double)vector_part<C>(c, q);
                    distance += diff * diff;
                }
            }
        }
        for (; j < d; ++j) {
            const double diff = (double)XT[(index_t)j * n + i] - (double)center[j];
            distance += diff * diff;
        }
        total += (double)sample_weight[i] * distance;
    }
    total = block_all_reduce<BLOCK>(total, reduce_value, Add());
    if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

// Per feature, the sum of squared deviations from `mean` in double (the tolerance's variance):
// block (x, y) takes a grid-stride share of feature y's points and writes its sum to
// partial[y, x] (added in a fixed order by the caller: the same value run to run). A grid
// over the points and the features, where a reduction over axis 0 would give each of d
// features one block.
template <typename T, int BLOCK>
__global__ void __launch_bounds__(BLOCK)
squared_deviations(const T* __restrict__ XT,          // IN  (d, n)
                   const double* __restrict__ mean,   // IN  (d)
                   index_t n,                         // IN
                   double* __restrict__ partial)      // OUT (d, gridDim.x)
{
    __shared__ double reduce_value[BLOCK / kWarpSize];
    const T* column = XT + (index_t)blockIdx.y * n;
    const double m = mean[blockIdx.y];
    double total = 0.0;
    for (index_t i = (index_t)blockIdx.x * BLOCK + threadIdx.x; i < n;
         i += (index_t)gridDim.x * BLOCK) {
        const double diff = (double)column[i] - m;
        total += diff * diff;
    }
    total = block_all_reduce<BLOCK>(total, reduce_value, Add());
    if (threadIdx.x == 0) partial[(index_t)blockIdx.y * gridDim.x + blockIdx.x] = total;
}

// Squared distance of each point to the centre of its cluster, in the data's precision: what
// empty clusters are relocated by (the farthest points, scikit-learn's rule).
template <typename T>
__global__ void point_distances(const T* __restrict__ XT,       // IN  (d, n)
                                const T* __restrict__ centers,  // IN  (k, d)
                                const int* __restrict__ labels, // IN  (n)
                                index_t n, int d,               // IN
                                T* __restrict__ distances)      // OUT (n)
{
    for (index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (index_t)gridDim.x * blockDim.x) {
        const T* center = centers + (index_t)labels[i] * d;
        T distance = 0;
        for (int j = 0; j < d; ++j) {
            const T diff = XT[(index_t)j * n + i] - center[j];
            distance += diff * diff;
        }
        distances[i] = distance;
    }
}

// Empty-cluster relocation on the device, one warp: the same steps, in the same order, as
// the host's lloyd.relocate_empty_clusters (move_to_empty_clusters). Nothing moves when
// every point lies on its centre (*largest == 0).
template <typename T>
__global__ void relocate_empty(const T* __restrict__ XT,             // IN  (d, n)
                               const T* __restrict__ sample_weight,  // IN  (n)
                               const int* __restrict__ labels,       // IN  (n)
                               index_t n, int d, int k,              // IN
                               const long long* __restrict__ far,    // IN  (n_empty)
                               int n_empty,                          // IN
                               const T* __restrict__ largest,        // IN  (1) max distance
                               int* __restrict__ empty_ids,          // SCRATCH (n_empty)
                               double* __restrict__ sums,            // INOUT (k, d)
                               double* __restrict__ weights)         // INOUT (k)
{
    if (*largest == (T)0) return;
    move_to_empty_clusters<T>(XT, sample_weight, labels, n, d, k, far, n_empty, empty_ids, sums,
                              weights);
}
