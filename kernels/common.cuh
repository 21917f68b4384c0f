// Shared helpers for gpumine's CUDA kernels.
#pragma once

// Indices that can pass 2^31 (n * d elements) are 64-bit.
typedef long long index_t;

// Largest finite value of T, the starting point of argmin searches.
template <typename T> __device__ __forceinline__ T max_value();
template <> __device__ __forceinline__ float max_value<float>() { return 3.402823466e+38f; }
template <> __device__ __forceinline__ double max_value<double>() { return 1.7976931348623157e+308; }

// Seed paper 004 §3: the warp-divergence-safe spinlock. A thread that fails to take the
// lock does not spin on it: it falls through, lets the threads of its warp that did take a
// lock finish their critical sections and release, and tries again on the next trip.
// `critical` runs with the lock held; the fence publishes its writes before the release.
template <typename Critical>
__device__ __forceinline__ void with_lock(int* lock, Critical critical) {
    bool done = false;
    while (!done) {
        if (atomicCAS(lock, 0, 1) == 0) {
            __threadfence();
            critical();
            __threadfence();
            atomicExch(lock, 0);
            done = true;
        }
    }
}

// The same for locks in shared memory: fences at block scope.
template <typename Critical>
__device__ __forceinline__ void with_shared_lock(int* lock, Critical critical) {
    bool done = false;
    while (!done) {
        if (atomicCAS(lock, 0, 1) == 0) {
            __threadfence_block();
            critical();
            __threadfence_block();
            atomicExch(lock, 0);
            done = true;
        }
    }
}
