// Shared helpers for gpumine's CUDA kernels.
#pragma once

// Indices that can pass 2^31 (n * d elements) are 64-bit.
typedef long long index_t;

// A hint that the line holding `global` will be read soon: fetched into L2. No value
// depends on it (a striding kernel's next rows, read while this step computes).
__device__ __forceinline__ void prefetch_l2(const void* global) {
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(global));
}

// Largest finite value of T, the starting point of argmin searches.
template <typename T> __device__ __forceinline__ T max_value();
template <> __device__ __forceinline__ float max_value<float>() { return 3.402823466e+38f; }
template <> __device__ __forceinline__ double max_value<double>() { return 1.7976931348623157e+308; }

// The lexicographic minimum of (value, index) over each group of WIDTH lanes (a power of
// two up to 32) by xor shuffles, every lane of the group ending with it: the smaller value,
// ties to the lower index (a NaN value is never taken from another lane). Lane 0 gets what
// a shuffle-down tree gives it, each step combining the same pair in the same order.
template <int WIDTH = 32, typename T>
__device__ __forceinline__ void group_argmin(T& best, int& best_index) {
#pragma unroll
    for (int offset = WIDTH / 2; offset > 0; offset >>= 1) {
        const T other = __shfl_xor_sync(0xffffffffu, best, offset, WIDTH);
        const int other_index = __shfl_xor_sync(0xffffffffu, best_index, offset, WIDTH);
        if (other < best || (other == best && other_index < best_index)) {
            best = other;
            best_index = other_index;
        }
    }
}

// Write a point's new label (active lanes); whether it differs from `previous`, the point's
// label before.
__device__ __forceinline__ bool write_label(int* labels, index_t i, bool active, int label,
                                            int previous) {
    if (!active) return false;
    labels[i] = label;
    return previous != label;
}

// Count, per warp, the points whose label changed (seed 000's "points changed" count, so the
// host needs no copy of the previous labels). Every lane of the warp must call it.
__device__ __forceinline__ void count_moved(bool moved, unsigned long long* changed) {
    const unsigned ballot = __ballot_sync(0xffffffffu, moved);
    if (changed != nullptr && ballot != 0u && (threadIdx.x & 31) == 0)
        atomicAdd(changed, (unsigned long long)__popc(ballot));
}

// Write a point's new label and count the changed ones (inactive lanes with active = false;
// every lane of the warp calls it).
__device__ __forceinline__ void store_label(int* labels, index_t i, bool active, int label,
                                            unsigned long long* changed) {
    count_moved(write_label(labels, i, active, label, active ? labels[i] : 0), changed);
}

// Append the lanes whose label moved to a move list (update="atomic-fixed" following the
// assignment: kmeans_update.cu's fixed_moves): one atomic a warp (every lane of the
// warp calls it). Slots past `capacity` are counted, not written: the reader then knows the
// list is incomplete and recomputes the sums.
__device__ __forceinline__ void record_move(bool moved, index_t row, int previous,
                                            unsigned* count,            // INOUT (1)
                                            unsigned capacity,          // IN
                                            index_t* __restrict__ rows, // OUT (capacity)
                                            int* __restrict__ from) {   // OUT (capacity)
    const unsigned ballot = __ballot_sync(0xffffffffu, moved);
    if (ballot == 0u) return;  // uniform across the warp
    const int lane = threadIdx.x & 31;
    unsigned first = 0u;
    if (lane == 0) first = atomicAdd(count, (unsigned)__popc(ballot));
    first = __shfl_sync(0xffffffffu, first, 0);
    const unsigned slot = first + (unsigned)__popc(ballot & ((1u << lane) - 1u));
    if (moved && slot < capacity) {
        rows[slot] = row;
        from[slot] = previous;
    }
}

// Seed paper 004 §3: the warp-divergence-safe spinlock. A thread that fails to take the
// lock does not spin on it: it passes over the critical section, the warp waits until the
// lanes that did take a lock have finished theirs and released (__syncwarp), and then all
// lanes still without their lock try again. Every lane that entered stays in the loop until
// the whole group is done, so the warp-synchronous calls see the same mask each trip.
// `critical` runs with the lock held and writes through volatile pointers (L2, never a
// stale L1 line); the fence before the release publishes its writes.
// Global locks (kGlobal): when no lane of the warp got its lock in a trip, the warp backs
// off exponentially with jitter (up to ~16 us), so that the ~8000 resident warps under
// full contention (k = 1) neither poll the lock's L2 line so often that the holder's
// release queues behind them nor wake in lockstep and leave the lock idle. Sleeping only
// in trips where no lane holds a lock never delays a holder.
template <bool kGlobal, typename Critical>
__device__ __forceinline__ void lock_and_run(int* lock, Critical critical) {
    const unsigned mask = __activemask();
    bool done = false;
    unsigned backoff = 32;
    while (__any_sync(mask, !done)) {
        bool took = false;
        if (!done && *(volatile int*)lock == 0 && atomicCAS(lock, 0, 1) == 0) {
            critical();
            if (kGlobal) __threadfence(); else __threadfence_block();
            atomicExch(lock, 0);
            done = took = true;
        }
        __syncwarp(mask);
        if (kGlobal && !__any_sync(mask, took)) {
            __nanosleep(backoff / 2 + (unsigned)(clock() & (backoff / 2 - 1)));
            backoff = backoff < (1u << 14) ? 2 * backoff : (1u << 14);
        }
    }
}

template <typename Critical>
__device__ __forceinline__ void with_lock(int* lock, Critical critical) {
    lock_and_run<true>(lock, critical);
}

template <typename Critical>
__device__ __forceinline__ void with_shared_lock(int* lock, Critical critical) {
    lock_and_run<false>(lock, critical);
}

// Row stride of a block's (k, d) partial sums in shared memory: d rounded up to an odd
// number. With an even stride a warp's atomics on feature j of 32 random clusters land on
// few banks (d = 8: on 4 of the 32, eight-way conflicts); an odd stride spreads them over
// all 32. The padding column is zeroed and never read.
__host__ __device__ __forceinline__ int odd_stride(int d) { return d | 1; }

// The block size of every launch that does not choose its own, for CUDA and for Python:
// gpumine.kernels.BLOCK is read from this line.
#define GPUMINE_BLOCK 256
// The most padded centres tc-exact's one-product kernel keys its top-2 for (kmeans_assign_tc.cu).
#define GPUMINE_TC_KEY_CENTRES 16384

constexpr int kWarpSize = 32;

// A value and its index: the argmin / argmax of a block reduction (ties: the lower index).
struct ValueIndex {
    double value;
    int index;
};

__device__ __forceinline__ double shuffle_down(double v, int offset) {
    return __shfl_down_sync(0xffffffffu, v, offset);
}
__device__ __forceinline__ int shuffle_down(int v, int offset) {
    return __shfl_down_sync(0xffffffffu, v, offset);
}
__device__ __forceinline__ long long shuffle_down(long long v, int offset) {
    return __shfl_down_sync(0xffffffffu, v, offset);
}
__device__ __forceinline__ unsigned shuffle_down(unsigned v, int offset) {
    return __shfl_down_sync(0xffffffffu, v, offset);
}
__device__ __forceinline__ unsigned long long shuffle_down(unsigned long long v, int offset) {
    return __shfl_down_sync(0xffffffffu, v, offset);
}
__device__ __forceinline__ ValueIndex shuffle_down(ValueIndex v, int offset) {
    return {__shfl_down_sync(0xffffffffu, v.value, offset),
            __shfl_down_sync(0xffffffffu, v.index, offset)};
}

__device__ __forceinline__ double positive_infinity() {
    return __longlong_as_double(0x7ff0000000000000ll);
}

// Reduction operators: op(a, b), and identity() (a double: the grid reductions' start).
struct Add {
    template <typename V> __device__ V operator()(V a, V b) const { return a + b; }
    static __device__ double identity() { return 0.0; }
};
struct Min {
    template <typename V> __device__ V operator()(V a, V b) const { return a < b ? a : b; }
    static __device__ double identity() { return positive_infinity(); }
};
struct Max {
    template <typename V> __device__ V operator()(V a, V b) const { return a > b ? a : b; }
    static __device__ double identity() { return -positive_infinity(); }
};
// fmin / fmax: a NaN is passed over rather than kept.
struct FMin {
    __device__ double operator()(double a, double b) const { return fmin(a, b); }
};
struct FMax {
    __device__ double operator()(double a, double b) const { return fmax(a, b); }
};
// The larger value, the lower index on ties (the first maximum).
struct ArgMax {
    __device__ ValueIndex operator()(ValueIndex a, ValueIndex b) const {
        return b.value > a.value || (b.value == a.value && b.index < a.index) ? b : a;
    }
};

// The one block reduction: op over one value per thread of a BLOCK-thread block, the result
// in every thread. Lanes fold by shuffles (lane 0 holds its warp's value), then every thread
// folds the warps' values in warp order: deterministic, the same arithmetic in every block.
// Every thread of the block must call it; scratch: BLOCK / 32 values of V in shared memory
// (free again when it returns).
template <int BLOCK, typename V, typename Op>
__device__ __forceinline__ V block_all_reduce(V value, V* scratch, Op op) {
    static_assert(BLOCK % kWarpSize == 0, "BLOCK is a whole number of warps");
#pragma unroll
    for (int offset = kWarpSize / 2; offset > 0; offset >>= 1)
        value = op(value, shuffle_down(value, offset));
    if ((threadIdx.x & (kWarpSize - 1)) == 0) scratch[threadIdx.x / kWarpSize] = value;
    __syncthreads();
    V total = scratch[0];
#pragma unroll
    for (int w = 1; w < BLOCK / kWarpSize; ++w) total = op(total, scratch[w]);
    __syncthreads();  // scratch may be written again
    return total;
}

// The one block scan: the exclusive prefix sum of one int per thread of a BLOCK-thread block,
// in thread order (lanes by shuffles, then the warps' totals in warp order), and the block's
// total in *total where it is given. Every thread of the block must call it; scratch:
// BLOCK / 32 ints in shared memory (free again when it returns).
template <int BLOCK>
__device__ __forceinline__ int block_exclusive_sum(int value, int* scratch,
                                                   int* total = nullptr) {
    static_assert(BLOCK % kWarpSize == 0, "BLOCK is a whole number of warps");
    const int lane = threadIdx.x & (kWarpSize - 1), warp = threadIdx.x / kWarpSize;
    int inclusive = value;
#pragma unroll
    for (int offset = 1; offset < kWarpSize; offset <<= 1) {
        const int other = __shfl_up_sync(0xffffffffu, inclusive, offset);
        if (lane >= offset) inclusive += other;
    }
    if (lane == kWarpSize - 1) scratch[warp] = inclusive;
    __syncthreads();
    int before = 0, all = 0;
#pragma unroll
    for (int w = 0; w < BLOCK / kWarpSize; ++w) {
        const int t = scratch[w];
        before += w < warp ? t : 0;
        all += t;
    }
    if (total != nullptr) *total = all;
    __syncthreads();  // scratch may be written again
    return before + inclusive - value;
}
