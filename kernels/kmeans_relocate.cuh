// Moving points into empty clusters, shared by the launch loop's relocate_empty kernel
// (kmeans_step.cu) and the fused loop (kmeans_loop.cu), so both make the host's moves.
#pragma once
#include "common.cuh"

// lloyd.relocate_empty_clusters' moves, by one warp (all 32 lanes call it): the empty
// clusters (weight not positive) are listed first, ascending, before anything moves (a
// cluster emptied by a move is not relocated in this pass); the r-th of them takes the point
// far[r] (farthest first): its weighted coordinates leave its old cluster's sums and become
// the new cluster's. Products in the data's precision, as on the host. labels, sums and
// weights are read through L2 (__ldcg): other blocks of the same launch may have written them.
template <typename T>
__device__ __forceinline__ void move_to_empty_clusters(
        const T* __restrict__ XT,             // IN  (d, n)
        const T* __restrict__ sample_weight,  // IN  (n)
        const int* labels,                    // IN  (n)
        index_t n, int d, int k,              // IN
        const long long* far,                 // IN  (n_empty) points, farthest first
        int n_empty,                          // IN
        int* empty_ids,                       // SCRATCH (n_empty)
        double* sums,                         // INOUT (k, d)
        double* weights) {                    // INOUT (k)
    const int lane = threadIdx.x & 31;
    int listed = 0;
    for (int base = 0; base < k && listed < n_empty; base += 32) {
        const int c = base + lane;
        unsigned empty = __ballot_sync(0xffffffffu, c < k && !(__ldcg(weights + c) > 0.0));
        while (empty && listed < n_empty) {
            if (lane == 0) empty_ids[listed] = base + __ffs(empty) - 1;
            empty &= empty - 1;
            ++listed;
        }
    }
    __syncwarp();
    for (int r = 0; r < listed; ++r) {
        const index_t point = (index_t)far[r];
        const int new_cluster = empty_ids[r];
        const int old_cluster = __ldcg(labels + point);
        const T weight = sample_weight[point];
        for (int j = lane; j < d; j += 32) {
            const double moved = (double)(XT[(index_t)j * n + point] * weight);
            sums[(index_t)old_cluster * d + j] = __ldcg(sums + (index_t)old_cluster * d + j)
                                                 - moved;
            sums[(index_t)new_cluster * d + j] = moved;
        }
        __syncwarp();
        if (lane == 0) {
            weights[new_cluster] = (double)weight;
            weights[old_cluster] = __ldcg(weights + old_cluster) - (double)weight;
        }
        __syncwarp();
    }
}
