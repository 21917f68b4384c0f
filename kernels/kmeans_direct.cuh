// The direct distance arithmetic shared by the assignment kernels (assign_tiled's loop,
// assign_registers, the fused Lloyd loop) and the tensor-core re-check, so all compute the
// same values: sum (x - c)^2 in T, features in ascending order, one fused multiply-add per
// feature, ties to the lowest index.
#pragma once
#include "common.cuh"

// A bound on a distance widened by a relative slack of 2^-40 (up: Hamerly's u, down: l)
// and rounded outward to float (kmeans_bounds.cu; tc-exact writes them too, for a seed).
__device__ __forceinline__ float bound_up(double v) {
    return __double2float_ru(v * (1.0 + 0x1p-40));
}
__device__ __forceinline__ float bound_down(double v) {
    return v <= 0.0 ? 0.0f : __double2float_rd(v * (1.0 - 0x1p-40));
}

// A point held in registers (zero-padded to DMAX features) against one centre row of
// DMAX elements in shared memory (zero-padded alike: the padding adds exact zeros).
template <typename T, int DMAX>
__device__ __forceinline__ T padded_squared_distance(const T (&x)[DMAX], const T* center) {
    T acc = T(0);
#pragma unroll
    for (int j = 0; j < DMAX; ++j) {
        const T diff = x[j] - center[j];
        acc += diff * diff;
    }
    return acc;
}

// Point i's features into registers, zero-padded past d (and all zero when !active): the
// register-held loops' point, loaded once before the centres are walked.
template <typename T, int DMAX>
__device__ __forceinline__ void load_padded_point(const T* __restrict__ XT, index_t n, int d,
                                                  index_t i, bool active, T (&x)[DMAX]) {
#pragma unroll
    for (int j = 0; j < DMAX; ++j) x[j] = (active && j < d) ? XT[(index_t)j * n + i] : T(0);
}

// Stage centres k0 .. k0 + kc - 1 into `tile` (KT rows of DMAX, zero-padded past kc and
// d) for the register-held loops; every thread of the block calls it (it synchronizes
// before, so the previous tile is no longer read, and after).
template <typename T, int KT, int DMAX>
__device__ __forceinline__ void stage_padded_tile(const T* __restrict__ centers, int k0, int kc,
                                                  int d, T* tile) {
    __syncthreads();
    for (int t = threadIdx.x; t < KT * DMAX; t += blockDim.x) {
        const int c = t / DMAX, j = t - c * DMAX;
        tile[t] = (c < kc && j < d) ? centers[(index_t)(k0 + c) * d + j] : T(0);
    }
    __syncthreads();
}

// Seed paper 002 §5.5's loop for point i (X column-major, XT[j * n + i]) over centres
// k_begin .. k_end - 1: the centroids stream through `tile` (KT * dt elements of shared
// memory) in portions of KT centroids x dt features; KT running distances stay in registers.
// The tile is feature-major (tile[j * KT + c]), so a feature's KT centroid values are
// contiguous and load as vectors. Returns the lowest index of the smallest distance below
// max_value<T>() (k_begin if none) and that distance in `best` (max_value<T>() if none):
// ranges merged in increasing order, keeping the earlier range on equal distances, give
// the whole loop's answer. Every thread of the block must call it (it synchronizes);
// inactive threads (active = false) only help stage the tiles.
template <typename T, int KT>
__device__ __forceinline__ int tiled_argmin_range(const T* __restrict__ XT,       // IN  (d, n)
                                                  const T* __restrict__ centers,  // IN  (k, d)
                                                  index_t n, int d, int k_begin, int k_end,
                                                  int dt, index_t i, bool active, T* tile,
                                                  T& best) {
    best = max_value<T>();
    int best_index = k_begin;
    for (int k0 = k_begin; k0 < k_end; k0 += KT) {
        const int kc = min(KT, k_end - k0);
        T acc[KT];
#pragma unroll
        for (int c = 0; c < KT; ++c) acc[c] = T(0);
        for (int j0 = 0; j0 < d; j0 += dt) {
            const int jc = min(dt, d - j0);
            __syncthreads();
            for (int t = threadIdx.x; t < kc * jc; t += blockDim.x) {
                const int c = t / jc, j = t - c * jc;
                tile[j * KT + c] = centers[(index_t)(k0 + c) * d + j0 + j];
            }
            __syncthreads();
            if (active) {
                for (int j = 0; j < jc; ++j) {
                    const T x = XT[(index_t)(j0 + j) * n + i];
                    const T* column = tile + j * KT;
#pragma unroll
                    for (int c = 0; c < KT; ++c) {
                        const T diff = x - column[c];
                        acc[c] += diff * diff;
                    }
                }
            }
        }
        if (active) {
#pragma unroll
            for (int c = 0; c < KT; ++c) {
                if (c < kc && acc[c] < best) {
                    best = acc[c];
                    best_index = k0 + c;
                }
            }
        }
    }
    return best_index;
}

// The loop over every centre: assign_tiled's label for point i.
template <typename T, int KT>
__device__ __forceinline__ int tiled_argmin(const T* __restrict__ XT,       // IN  (d, n)
                                            const T* __restrict__ centers,  // IN  (k, d)
                                            index_t n, int d, int k, int dt, index_t i,
                                            bool active, T* tile) {
    T best;
    return tiled_argmin_range<T, KT>(XT, centers, n, d, 0, k, dt, i, active, tile, best);
}

// Point x (d values, any memory) against one centre row: tiled_argmin_range's arithmetic
// for one pair (features ascending, `acc += diff * diff`), so the same value.
template <typename T>
__device__ __forceinline__ T row_distance(const T* x, const T* __restrict__ center, int d) {
    T acc = T(0);
    for (int j = 0; j < d; ++j) {
        const T diff = x[j] - center[j];
        acc += diff * diff;
    }
    return acc;
}
