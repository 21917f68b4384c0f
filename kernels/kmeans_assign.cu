// k-means assignment kernels. X is column-major: feature j of point i at XT[j * n + i].
#include "common.cuh"
#include "kmeans_direct.cuh"

// Seed paper 002 §5.5: one thread per point; the centroids are streamed through shared
// memory in portions of KT centroids x dt features, so any k and any d fit. Each thread
// keeps KT running squared distances in registers and the best (distance, index) so far;
// distances are computed directly as sum (x - c)^2 in T (exact FP32 for float), ties go to
// the lowest index; the number of labels that changed is added to *changed. Shared memory: KT * dt * sizeof(T) bytes (dynamic).
template <typename T, int KT>
__global__ void assign_tiled(const T* __restrict__ XT,       // IN  (d, n) points
                             const T* __restrict__ centers,  // IN  (k, d) centroids
                             index_t n,                      // IN
                             int d,                          // IN
                             int k,                          // IN
                             int dt,                         // IN  features per portion
                             int* __restrict__ labels,       // INOUT (n) previous labels in
                             unsigned long long* changed)    // INOUT (1) += labels changed,
                                                             //       may be null
{
    extern __shared__ __align__(16) unsigned char shared_raw[];
    const index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    const bool active = i < n;
    const int best_index = tiled_argmin<T, KT>(XT, centers, n, d, k, dt, i, active,
                                               reinterpret_cast<T*>(shared_raw));
    store_label(labels, i, active, best_index, changed);
}

// assign_tiled for d <= DMAX (runtime specialization on d, as seed 000 §7 does): the points
// stay in registers, loaded once; centroid tiles of KT x DMAX are zero-padded past d, so
// the padded features add (0 - 0)^2 = 0 and the loops unroll fully. Each thread takes PPT
// points (i, i + blockDim.x, ...: coalesced loads), so that a centre read from shared memory
// into registers serves PPT distances; each distance is padded_squared_distance's arithmetic.
// Shared memory: KT * DMAX * sizeof(T) bytes (dynamic). Grid: ceil(n / (blockDim.x * PPT)).
template <typename T, int KT, int DMAX, int PPT>
__global__ void assign_registers(const T* __restrict__ XT,       // IN  (d, n) points
                                 const T* __restrict__ centers,  // IN  (k, d) centroids
                                 index_t n,                      // IN
                                 int d,                          // IN  d <= DMAX
                                 int k,                          // IN
                                 int* __restrict__ labels,       // INOUT (n) previous in
                                 unsigned long long* changed)    // INOUT (1) += changed,
                                                                 //       may be null
{
    extern __shared__ __align__(16) unsigned char shared_raw[];
    T* tile = reinterpret_cast<T*>(shared_raw);
    const index_t first = (index_t)blockIdx.x * blockDim.x * PPT + threadIdx.x;
    T x[PPT][DMAX];
    T best[PPT];
    int best_index[PPT];
#pragma unroll
    for (int p = 0; p < PPT; ++p) {
        const index_t i = first + (index_t)p * blockDim.x;
        load_padded_point<T, DMAX>(XT, n, d, i, i < n, x[p]);
        best[p] = max_value<T>();
        best_index[p] = 0;
    }
    for (int k0 = 0; k0 < k; k0 += KT) {
        const int kc = min(KT, k - k0);
        stage_padded_tile<T, KT, DMAX>(centers, k0, kc, d, tile);
#pragma unroll
        for (int c = 0; c < KT; ++c) {
            T center[DMAX];
#pragma unroll
            for (int j = 0; j < DMAX; ++j) center[j] = tile[c * DMAX + j];
#pragma unroll
            for (int p = 0; p < PPT; ++p) {
                const T acc = padded_squared_distance<T, DMAX>(x[p], center);
                if (c < kc && acc < best[p]) {
                    best[p] = acc;
                    best_index[p] = k0 + c;
                }
            }
        }
    }
#pragma unroll
    for (int p = 0; p < PPT; ++p) {
        const index_t i = first + (index_t)p * blockDim.x;
        store_label(labels, i, i < n, best_index[p], changed);
    }
}

// Epilogue of the GEMM assignment: for a tile of rows of G = X_tile . C^T (rows x k,
// row-major), label = argmin_j (||c_j||^2 - 2 G[r, j]). One warp per row; ties go to the
// lowest index. Only this tile of the n x k matrix ever exists.
template <typename T>
__global__ void argmin_epilogue(const T* __restrict__ products,        // IN  (rows, k)
                                const T* __restrict__ center_norms,    // IN  (k) ||c||^2
                                index_t rows,                          // IN
                                int k,                                 // IN
                                int* __restrict__ labels)              // OUT (rows)
{
    const int lane = threadIdx.x & 31;
    const index_t row = ((index_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (row >= rows) return;
    T best = max_value<T>();
    int best_index = 0x7fffffff;
    for (int j = lane; j < k; j += 32) {
        const T value = center_norms[j] - T(2) * products[row * k + j];
        if (value < best) {
            best = value;
            best_index = j;
        }
    }
    group_argmin(best, best_index);
    if (lane == 0) labels[row] = best_index;
}
