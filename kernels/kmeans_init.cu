// Greedy k-means++ (Arthur & Vassilvitskii 2007; seed paper 002 §3) in one cooperative launch.
// X is column-major: feature j of point i at XT[j * n + i]. Distances are computed directly,
// sum (x - c)^2, in double whatever T is; potentials and sampling sums are double.
//
// The grid is G co-resident blocks; block b owns the contiguous range of points
// [b * chunk, min(n, (b + 1) * chunk)), chunk a multiple of 32, so every aligned group of 32
// points (a "tile") lies in one block. After each centre the kernel holds, for the value
// v_i = w_i * D(x_i)^2 that the next candidates are drawn from: the sum of every tile
// (tile_sums) and of every block (block_sums). Drawing a candidate ("the first i whose
// prefix sum of v reaches r", numpy.searchsorted's rule) is then a three-level search --
// blocks, the block's tiles, the tile's 32 points -- done by one warp with warp prefix sums
// in a few dozen steps, by every block for itself (the same arithmetic in the same order, so
// every block draws the same points) instead of a grid-wide barrier.
//
// Per centre: [every block] draw the m candidates from the uniforms; score them on the
// block's points (sum of w * min(D^2, d(x, cand)^2) per candidate) into `partial`;
// grid barrier; [every block] add the partials in a fixed order, keep the candidate of
// lowest potential (the first on ties, as numpy.argmin); update D^2 and, in the same pass,
// the tile and block sums on the block's points; block 0 writes the centre; grid barrier.
// Two barriers per centre, one launch per init: nothing comes back to the host until the
// end. Values another block wrote
// are read with __ldcg (L2, never a stale L1 line) after the barrier.
#include <cooperative_groups.h>
#include "common.cuh"

namespace cg = cooperative_groups;

namespace kpp {

constexpr int kWarp = 32;

__device__ __forceinline__ double warp_inclusive_scan(double v, int lane) {
#pragma unroll
    for (int offset = 1; offset < kWarp; offset <<= 1) {
        const double other = __shfl_up_sync(0xffffffffu, v, offset);
        if (lane >= offset) v += other;
    }
    return v;
}

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// One warp: the first position p in [lo, hi) whose running sum base + value(lo..p) reaches r
// (>= r; > r when `right`, numpy's side="right"). `base` becomes the sum before p. When no
// position reaches r (r past the end by rounding) the last position of positive value is
// returned (hi - 1 if none), so a drawn point always carries weight when any point does.
template <typename Value>
__device__ index_t warp_search(index_t lo, index_t hi, double r, bool right, double& base,
                               Value value) {
    const int lane = threadIdx.x & (kWarp - 1);
    index_t last_positive = hi - 1;
    double base_at_last = base;
    // The next chunk's values are loaded before this chunk is scanned, so a step costs a
    // scan, not a memory round trip.
    double next = lo + lane < hi ? value(lo + lane) : 0.0;
    for (index_t start = lo; start < hi; start += kWarp) {
        const index_t p = start + lane;
        const double v = next;
        next = p + kWarp < hi ? value(p + kWarp) : 0.0;
        const double inclusive = warp_inclusive_scan(v, lane);
        const double running = base + inclusive;
        const bool reached = p < hi && (right ? running > r : running >= r);
        const unsigned hit = __ballot_sync(0xffffffffu, reached);
        if (hit) {
            const int first = __ffs(hit) - 1;
            base += __shfl_sync(0xffffffffu, inclusive - v, first);
            return start + first;
        }
        const unsigned positive = __ballot_sync(0xffffffffu, p < hi && v > 0.0);
        if (positive) {
            const int last = 31 - __clz(positive);
            last_positive = start + last;
            base_at_last = base + __shfl_sync(0xffffffffu, inclusive - v, last);
        }
        base += __shfl_sync(0xffffffffu, inclusive, kWarp - 1);
    }
    base = base_at_last;
    return last_positive;
}

// One warp draws one point: the first i with prefix(v)_i >= u * total, through the block
// sums, then the tile sums of that block, then the tile's points.
template <typename T>
__device__ index_t draw(double u, bool right, index_t n, index_t chunk, int n_blocks,
                        const double* block_sums, const double* tile_sums, const T* weight,
                        const double* closest, bool first) {
    const int lane = threadIdx.x & (kWarp - 1);
    double total = 0.0;
    for (int start = 0; start < n_blocks; start += kWarp) {
        const int b = start + lane;
        total += warp_sum(b < n_blocks ? __ldcg(block_sums + b) : 0.0);
    }
    const double r = u * total;
    double base = 0.0;
    const index_t block = warp_search(0, n_blocks, r, right, base,
                                      [&](index_t b) { return __ldcg(block_sums + b); });
    const index_t lo = block * chunk;
    const index_t hi = min(n, lo + chunk);
    const index_t tile = warp_search(lo / kWarp, (hi + kWarp - 1) / kWarp, r, right, base,
                                     [&](index_t t) { return __ldcg(tile_sums + t); });
    const index_t tile_hi = min(hi, (tile + 1) * kWarp);
    return warp_search(tile * kWarp, tile_hi, r, right, base, [&](index_t i) {
        const double w = weight != nullptr ? (double)weight[i] : 1.0;
        return first ? w : w * __ldcg(closest + i);
    });
}

// Block-wide sum of one double per thread (every thread gets the result).
template <int BLOCK>
__device__ double block_sum(double v, double* scratch) {
    const int lane = threadIdx.x & (kWarp - 1), warp = threadIdx.x / kWarp;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    double total = 0.0;
#pragma unroll
    for (int w = 0; w < BLOCK / kWarp; ++w) total += scratch[w];
    return total;
}

// A point's features as doubles. DMAX > 0 (d <= DMAX): all d loads are issued before any
// is used, so a thread waits for memory once per point instead of once per feature;
// DMAX = 0: any d, read feature by feature.
template <typename T, int DMAX>
struct PointLoader {
    T x[DMAX > 0 ? DMAX : 1];  // in T: half the registers of doubles for float data
    __device__ __forceinline__ void load(const T* XT, index_t n, int d, index_t i) {
        if (DMAX > 0) {
#pragma unroll
            for (int j = 0; j < DMAX; ++j) x[j] = j < d ? XT[(index_t)j * n + i] : T(0);
        }
    }
    __device__ __forceinline__ double get(const T* XT, index_t n, index_t i, int j) const {
        if (DMAX > 0) return (double)x[j < DMAX ? j : 0];
        return (double)XT[(index_t)j * n + i];
    }
};

}  // namespace kpp

// BLOCK threads per block; MT the most candidates per centre (m <= MT); DMAX: d <= DMAX
// with the point held in registers, or 0 for any d.
template <typename T, int BLOCK, int MT, int DMAX>
__global__ void __launch_bounds__(BLOCK, MT <= 8 ? 2 : 1)
kmeans_plusplus(const T* __restrict__ XT,            // IN  (d, n) points, centred
                const T* __restrict__ weight,        // IN  (n) sample weights, or null (all 1)
                index_t n,                           // IN
                int d,                               // IN
                int k,                               // IN  centres to choose
                int m,                               // IN  candidates per centre, 1..MT
                index_t chunk,                       // IN  points per block, a multiple of 32
                const double* __restrict__ uniforms, // IN  (1 + (k - 1) * m) in [0, 1)
                int shared_candidates,               // IN  1: candidates fit shared memory
                double* __restrict__ closest,        // OUT (n) D(x)^2 to the chosen centres
                double* __restrict__ tile_sums,      // OUT (ceil(n / 32)) scratch
                double* __restrict__ block_sums,     // OUT (gridDim.x) scratch
                double* __restrict__ partial,        // OUT (gridDim.x, MT) scratch
                T* __restrict__ centers,             // OUT (k, d)
                long long* __restrict__ chosen)      // OUT (k) index of each centre's point
{
    cg::grid_group grid = cg::this_grid();
    extern __shared__ double kpp_shared[];  // m * d candidate coordinates when they fit
    __shared__ double scratch[BLOCK / kpp::kWarp];
    __shared__ long long candidate_ids[MT];
    __shared__ double candidate_potential[MT];
    __shared__ int best_slot;
    const int lane = threadIdx.x & (kpp::kWarp - 1), warp = threadIdx.x / kpp::kWarp;
    const int n_blocks = gridDim.x;
    const index_t lo = (index_t)blockIdx.x * chunk;
    const index_t hi = min(n, lo + chunk);

    // D^2 of this block's points to point `id` min'ed into `closest` (`first`: set; id < 0:
    // no centre yet, v = w), and in the same pass the sums of v = w * D^2 over this block's
    // tiles and over the block, for the next draw.
    auto update_and_publish = [&](long long id, bool first) {
        double block_total = 0.0;
        for (index_t base = lo; base < hi; base += BLOCK) {
            const index_t i = base + threadIdx.x;
            double v = 0.0;
            if (i < hi) {
                const double w = weight != nullptr ? (double)weight[i] : 1.0;
                if (id < 0) {
                    v = w;
                } else {
                    kpp::PointLoader<T, DMAX> point;
                    point.load(XT, n, d, i);
                    double dist = 0.0;
#pragma unroll
                    for (int j = 0; j < (DMAX > 0 ? DMAX : d); ++j) {
                        if (j < d) {
                            const double diff = point.get(XT, n, i, j)
                                                - (double)XT[(index_t)j * n + id];
                            dist += diff * diff;
                        }
                    }
                    const double own = first ? dist : fmin(closest[i], dist);
                    closest[i] = own;
                    v = w * own;
                }
            }
            const double tile = kpp::warp_sum(v);
            const index_t tile_start = base + (index_t)warp * kpp::kWarp;
            if (lane == 0 && tile_start < hi) tile_sums[tile_start / kpp::kWarp] = tile;
            block_total += tile;  // every lane holds the tile sum; lane 0's copy is added below
        }
        const double total = kpp::block_sum<BLOCK>(lane == 0 ? block_total : 0.0, scratch);
        if (threadIdx.x == 0) block_sums[blockIdx.x] = total;
    };

    auto write_center = [&](int c, long long id) {
        if (blockIdx.x == 0) {
            for (int j = threadIdx.x; j < d; j += BLOCK)
                centers[(index_t)c * d + j] = XT[(index_t)j * n + id];
            if (threadIdx.x == 0) chosen[c] = id;
        }
    };

    // The first centre: drawn with probability proportional to the weight (side="right",
    // numpy's RandomState.choice).
    update_and_publish(-1, true);
    grid.sync();
    if (warp == 0) {
        const index_t id = kpp::draw<T>(uniforms[0], true, n, chunk, n_blocks, block_sums,
                                        tile_sums, weight, closest, true);
        if (lane == 0) candidate_ids[0] = id;
    }
    __syncthreads();
    long long best_id = candidate_ids[0];
    write_center(0, best_id);
    grid.sync();  // every block has read the weight sums of the first draw
    update_and_publish(best_id, true);
    grid.sync();

    for (int c = 1; c < k; ++c) {
        // Draw the m candidates (every block the same ones).
        for (int t = warp; t < m; t += BLOCK / kpp::kWarp) {
            const index_t id = kpp::draw<T>(uniforms[1 + (index_t)(c - 1) * m + t], false, n,
                                            chunk, n_blocks, block_sums, tile_sums, weight,
                                            closest, false);
            if (lane == 0) candidate_ids[t] = id;
        }
        __syncthreads();
        if (shared_candidates) {
            for (int e = threadIdx.x; e < m * d; e += BLOCK) {
                const int t = e / d, j = e - t * d;
                kpp_shared[e] = (double)XT[(index_t)j * n + candidate_ids[t]];
            }
            __syncthreads();
        }
        // Score: sum over this block's points of w * min(D^2, d(x, candidate)^2).
        double potential[MT];
#pragma unroll
        for (int t = 0; t < MT; ++t) potential[t] = 0.0;
        for (index_t i = lo + threadIdx.x; i < hi; i += BLOCK) {
            double dist[MT];
#pragma unroll
            for (int t = 0; t < MT; ++t) dist[t] = 0.0;
            kpp::PointLoader<T, DMAX> point;
            point.load(XT, n, d, i);
            const double w = weight != nullptr ? (double)weight[i] : 1.0;
            const double own = closest[i];
#pragma unroll
            for (int j = 0; j < (DMAX > 0 ? DMAX : d); ++j) {
                if (DMAX > 0 && j >= d) break;
                const double x = point.get(XT, n, i, j);
#pragma unroll
                for (int t = 0; t < MT; ++t) {
                    if (t < m) {
                        const double c_tj = shared_candidates
                            ? kpp_shared[t * d + j]
                            : (double)XT[(index_t)j * n + candidate_ids[t]];
                        const double diff = x - c_tj;
                        dist[t] += diff * diff;
                    }
                }
            }
#pragma unroll
            for (int t = 0; t < MT; ++t)
                if (t < m) potential[t] += w * fmin(own, dist[t]);
        }
#pragma unroll
        for (int t = 0; t < MT; ++t) {
            if (t < m) {
                const double total = kpp::block_sum<BLOCK>(potential[t], scratch);
                if (threadIdx.x == 0) partial[(index_t)blockIdx.x * MT + t] = total;
            }
        }
        grid.sync();
        // Choose: the candidate of lowest total potential (the first on ties), each total
        // added by one warp over the blocks in a fixed order.
        for (int t = warp; t < m; t += BLOCK / kpp::kWarp) {
            double total = 0.0;
            for (int start = 0; start < n_blocks; start += kpp::kWarp) {
                const int b = start + lane;
                total += kpp::warp_sum(b < n_blocks ? __ldcg(partial + (index_t)b * MT + t) : 0.0);
            }
            if (lane == 0) candidate_potential[t] = total;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int best_t = 0;
            for (int t = 1; t < m; ++t)
                if (candidate_potential[t] < candidate_potential[best_t]) best_t = t;
            best_slot = best_t;
        }
        __syncthreads();
        best_id = candidate_ids[best_slot];
        write_center(c, best_id);
        update_and_publish(best_id, false);
        grid.sync();
    }
}
