// Greedy k-means++ (Arthur & Vassilvitskii 2007; seed paper 002 §3) in one cooperative launch.
// X is column-major: feature j of point i at XT[j * n + i]. Distances are computed directly,
// sum (x - c)^2, in double whatever T is; potentials and sampling sums are double.
//
// The grid is G co-resident blocks; block b owns the contiguous range of points
// [b * chunk, min(n, (b + 1) * chunk)), chunk a multiple of 32, so every aligned group of 32
// points (a "tile") lies in one block. After each centre the kernel holds, for the value
// v_i = w_i * D(x_i)^2 that the next candidates are drawn from: the sum of every tile
// (tile_sums) and of every block (partial). Drawing a candidate ("the first i whose
// prefix sum of v reaches r", numpy.searchsorted's rule) is then a three-level search --
// blocks, the block's tiles, the tile's 32 points -- done by one warp with warp prefix sums
// in a few dozen steps, by every block for itself (the same arithmetic in the same order, so
// every block draws the same points) instead of a grid-wide barrier.
//
// Per centre: [every block] draw the m candidates from the last choice's sums; one pass
// over the block's points folds the last chosen centre into D^2 and sums, per tile and per
// block, w * min(D^2, d(x, cand)^2) for every candidate; grid barrier; [every block] add
// the block sums in a fixed order and keep the candidate of lowest potential (the first on
// ties, as numpy.argmin): its tile and block sums are the next draw's. One barrier and one
// pass over X per centre, one launch per init: nothing comes back to the host until the end.
// Values another block wrote are read with __ldcg (L2, never a stale L1 line).
#include <cooperative_groups.h>
#include "common.cuh"

namespace cg = cooperative_groups;

namespace kpp {

constexpr int kWarp = 32;
// Blocks per SM the kernel is compiled for (at most 85, 128, 255 registers per thread at
// 256 threads); the scoring loop holds MT candidate distances in double.
template <int MT> constexpr int kMinBlocks = MT <= 8 ? 3 : MT <= 16 ? 2 : 1;

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

// Sums over the warp of MT values per lane (MT a power of two, at most 32), in
// log2(MT) + log2(32 / MT) shuffle steps instead of MT * 5: at each of the first steps a
// lane keeps half of its values and sends the other half to its partner, which adds them
// (a transpose-reduce). Returns the lane's share: the warp sum of value held_index(lane),
// which every lane of a group of 32 / MT consecutive lanes holds.
template <int MT>
__device__ __forceinline__ double transpose_sum(double (&v)[MT], int lane) {
    int width = MT;
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        if (width > 1) {
            const int half = width / 2;
            const bool upper = (lane & offset) != 0;
#pragma unroll
            for (int i = 0; i < MT / 2; ++i) {
                if (i < half) {
                    const double send = upper ? v[i] : v[i + half];
                    const double keep = upper ? v[i + half] : v[i];
                    v[i] = keep + __shfl_xor_sync(0xffffffffu, send, offset);
                }
            }
            width = half;
        } else {
            v[0] += __shfl_xor_sync(0xffffffffu, v[0], offset);
        }
    }
    return v[0];
}

// Which of the MT values transpose_sum leaves in `lane`.
template <int MT>
__device__ __forceinline__ int held_index(int lane) {
    int index = 0, half = MT / 2;
#pragma unroll
    for (int offset = 16; offset > 0 && half > 0; offset >>= 1, half >>= 1)
        if (lane & offset) index += half;
    return index;
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
// sums (block_sums[b * stride]), then the tile sums of that block, then the tile's points,
// whose values v_i are point_value(i).
template <typename PointValue>
__device__ index_t draw(double u, bool right, index_t n, index_t chunk, int n_blocks,
                        const double* block_sums, int stride, const double* tile_sums,
                        PointValue point_value) {
    const int lane = threadIdx.x & (kWarp - 1);
    double total = 0.0;
    for (int start = 0; start < n_blocks; start += kWarp) {
        const int b = start + lane;
        total += warp_sum(b < n_blocks ? __ldcg(block_sums + (index_t)b * stride) : 0.0);
    }
    const double r = u * total;
    double base = 0.0;
    const index_t block = warp_search(0, n_blocks, r, right, base, [&](index_t b) {
        return __ldcg(block_sums + b * stride);
    });
    const index_t lo = block * chunk;
    const index_t hi = min(n, lo + chunk);
    const index_t tile = warp_search(lo / kWarp, (hi + kWarp - 1) / kWarp, r, right, base,
                                     [&](index_t t) { return __ldcg(tile_sums + t); });
    const index_t tile_hi = min(hi, (tile + 1) * kWarp);
    return warp_search(tile * kWarp, tile_hi, r, right, base, point_value);
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

// Squared distance of the point (features from `point`, as doubles) to the centre whose
// coordinates are at(j): sum (x - c)^2 in double, features ascending, one fused multiply-add
// each. The score pass and the draw both use it, so a point's value is the same in both.
template <int DMAX, typename Point, typename Coord>
__device__ __forceinline__ double squared_distance(int d, const Point& point, Coord at) {
    double dist = 0.0;
#pragma unroll
    for (int j = 0; j < (DMAX > 0 ? DMAX : d); ++j) {
        if (DMAX > 0 && j >= d) break;
        const double diff = point(j) - at(j);
        dist = fma(diff, diff, dist);
    }
    return dist;
}

// BLOCK threads per block; MT the most candidates per centre (m <= MT); DMAX: d <= DMAX
// with the point held in registers, or 0 for any d.
//
// One pass over the points per centre. `closest` lags one centre behind: the pass that
// scores the candidates of centre c first folds in the centre chosen last (c - 1, the
// "pending" centre: D^2 = min(D^2, d(x, pending)^2), written back), then computes for every
// candidate t the new value w * min(D^2, d(x, t)^2), adding it per tile (tile_sums) and per
// block (partial) for every t. Once the best candidate t* is known, its tile and block sums
// are the draw sums of the next centre, so no second pass is needed; the draw's last level
// (a tile's 32 points) folds the pending centre in on the fly. Those sums are double
// buffered by the parity of c: a block that starts scoring centre c + 1 writes the other
// buffer than the one a slower block may still be drawing from. A draw may read a
// `closest` entry that its owner has already lowered by the same pending centre; min is
// idempotent, so the value is the same either way. One grid barrier per centre.
template <typename T, int BLOCK, int MT, int DMAX>
__global__ void __launch_bounds__(BLOCK, kpp::kMinBlocks<MT>)
kmeans_plusplus(const T* __restrict__ XT,            // IN  (d, n) points, centred
                const T* __restrict__ weight,        // IN  (n) sample weights, or null (all 1)
                index_t n,                           // IN
                int d,                               // IN
                int k,                               // IN  centres to choose
                int m,                               // IN  candidates per centre, 1..MT
                index_t chunk,                       // IN  points per block, a multiple of 32
                const double* __restrict__ uniforms, // IN  (1 + (k - 1) * m) in [0, 1)
                int shared_candidates,               // IN  1: candidates + pending fit shared
                double* __restrict__ closest,        // OUT (n) D(x)^2, one centre behind
                double* __restrict__ tile_sums,      // OUT (2, MT, ceil(n / 32)) scratch
                double* __restrict__ partial,        // OUT (2, gridDim.x, MT) scratch
                T* __restrict__ centers,             // OUT (k, d)
                long long* __restrict__ chosen)      // OUT (k) index of each centre's point
{
    cg::grid_group grid = cg::this_grid();
    extern __shared__ double kpp_shared[];  // (m + 1) * d coordinates: candidates, pending
    __shared__ double scratch[BLOCK / kpp::kWarp];
    __shared__ double warp_potential[BLOCK / kpp::kWarp][MT];
    __shared__ long long candidate_ids[MT];
    __shared__ double candidate_potential[MT];
    __shared__ int best_slot;
    const int lane = threadIdx.x & (kpp::kWarp - 1), warp = threadIdx.x / kpp::kWarp;
    const int n_blocks = gridDim.x;
    const index_t n_tiles = (n + kpp::kWarp - 1) / kpp::kWarp;
    const index_t lo = (index_t)blockIdx.x * chunk;
    const index_t hi = min(n, lo + chunk);
    auto tiles_of = [&](int parity, int t) {
        return tile_sums + ((index_t)parity * MT + t) * n_tiles;
    };
    auto partial_of = [&](int parity) { return partial + (index_t)parity * n_blocks * MT; };
    auto coordinate = [&](long long id) {
        return [=](int j) { return (double)XT[(index_t)j * n + id]; };
    };

    // The first centre's draw sums (v = w), then D^2 to the first centre and its draw sums,
    // into buffer 0, slot 0 (as if candidate 0 of "centre 0" had been chosen).
    auto publish_first = [&](long long id) {
        double block_total = 0.0;
        double* tiles = tiles_of(0, 0);
        for (index_t base = lo; base < hi; base += BLOCK) {
            const index_t i = base + threadIdx.x;
            double v = 0.0;
            if (i < hi) {
                const double w = weight != nullptr ? (double)weight[i] : 1.0;
                if (id < 0) {
                    v = w;
                } else {
                    const double own = squared_distance<DMAX>(
                        d, [&](int j) { return (double)XT[(index_t)j * n + i]; }, coordinate(id));
                    closest[i] = own;
                    v = w * own;
                }
            }
            const double tile = kpp::warp_sum(v);
            const index_t tile_start = base + (index_t)warp * kpp::kWarp;
            if (lane == 0 && tile_start < hi) tiles[tile_start / kpp::kWarp] = tile;
            block_total += tile;
        }
        const double total = block_all_reduce<BLOCK>(lane == 0 ? block_total : 0.0, scratch, Add());
        if (threadIdx.x == 0) partial_of(0)[(index_t)blockIdx.x * MT] = total;
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
    publish_first(-1);
    grid.sync();
    if (warp == 0) {
        const index_t id = kpp::draw(uniforms[0], true, n, chunk, n_blocks, partial_of(0),
                                     MT, tiles_of(0, 0), [&](index_t i) {
            return weight != nullptr ? (double)weight[i] : 1.0;
        });
        if (lane == 0) candidate_ids[0] = id;
    }
    __syncthreads();
    long long pending = candidate_ids[0];
    write_center(0, pending);
    grid.sync();  // every block has read the weight sums of the first draw
    publish_first(pending);
    grid.sync();
    int slot = 0;  // the draw sums of the last choice: buffer (c - 1) & 1, slot `slot`

    for (int c = 1; c < k; ++c) {
        const int parity = c & 1, previous = parity ^ 1;
        // Draw the m candidates (every block the same ones), from the sums of the last
        // choice; a tile's points fold in the pending centre.
        for (int t = warp; t < m; t += BLOCK / kpp::kWarp) {
            const index_t id = kpp::draw(
                uniforms[1 + (index_t)(c - 1) * m + t], false, n, chunk, n_blocks,
                partial_of(previous) + slot, MT, tiles_of(previous, slot), [&](index_t i) {
                    const double w = weight != nullptr ? (double)weight[i] : 1.0;
                    const double own = fmin(__ldcg(closest + i), squared_distance<DMAX>(
                        d, [&](int j) { return (double)XT[(index_t)j * n + i]; },
                        coordinate(pending)));
                    return w * own;
                });
            if (lane == 0) candidate_ids[t] = id;
        }
        __syncthreads();
        if (shared_candidates) {
            for (int e = threadIdx.x; e < (m + 1) * d; e += BLOCK) {
                const int t = e / d, j = e - t * d;
                const long long id = t < m ? candidate_ids[t] : pending;
                kpp_shared[e] = (double)XT[(index_t)j * n + id];
            }
            __syncthreads();
        }
        auto candidate = [&](int t) {  // coordinate j of candidate t (t = m: the pending centre)
            return [&, t](int j) {
                return shared_candidates
                    ? kpp_shared[t * d + j]
                    : (double)XT[(index_t)j * n + (t < m ? candidate_ids[t] : pending)];
            };
        };
        // Score: per tile and per block, the sum of w * min(D^2, d(x, candidate)^2). After
        // each tile's transpose-reduce a lane holds the tile sum of candidate `mine`.
        const int mine = kpp::held_index<MT>(lane);
        const bool writer = (lane & (kpp::kWarp / MT - 1)) == 0;
        double potential = 0.0;  // this lane's candidate, over the block's tiles
        for (index_t base = lo; base < hi; base += BLOCK) {
            const index_t i = base + threadIdx.x;
            const bool active = i < hi;
            kpp::PointLoader<T, DMAX> point;
            if (active) point.load(XT, n, d, i);
            auto x = [&](int j) { return point.get(XT, n, i, j); };
            double w = 0.0, own = 0.0;
            if (active) {
                w = weight != nullptr ? (double)weight[i] : 1.0;
                own = closest[i];
                const double to_pending = squared_distance<DMAX>(d, x, candidate(m));
                if (to_pending < own) {
                    own = to_pending;
                    closest[i] = own;
                }
            }
            double v[MT];
#pragma unroll
            for (int t = 0; t < MT; ++t)
                v[t] = active && t < m
                    ? w * fmin(own, squared_distance<DMAX>(d, x, candidate(t))) : 0.0;
            const double tile_sum = kpp::transpose_sum<MT>(v, lane);
            const index_t tile_start = base + (index_t)warp * kpp::kWarp;
            if (writer && mine < m && tile_start < hi)
                tiles_of(parity, mine)[tile_start / kpp::kWarp] = tile_sum;
            potential += tile_sum;
        }
        // The block sum of every candidate in one exchange: each warp's writer lanes post
        // their candidates' sums, then thread t adds candidate t's over the warps in order
        // (block_all_reduce's arithmetic: the other lanes' zeros add nothing).
        if (writer && mine < m) warp_potential[warp][mine] = potential;
        __syncthreads();
        if (threadIdx.x < m) {
            double total = 0.0;
#pragma unroll
            for (int w = 0; w < BLOCK / kpp::kWarp; ++w) total += warp_potential[w][threadIdx.x];
            partial_of(parity)[(index_t)blockIdx.x * MT + threadIdx.x] = total;
        }
        grid.sync();
        // Choose: the candidate of lowest total potential (the first on ties), each total
        // added by one warp over the blocks in a fixed order.
        for (int t = warp; t < m; t += BLOCK / kpp::kWarp) {
            double total = 0.0;
            for (int start = 0; start < n_blocks; start += kpp::kWarp) {
                const int b = start + lane;
                total += kpp::warp_sum(
                    b < n_blocks ? __ldcg(partial_of(parity) + (index_t)b * MT + t) : 0.0);
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
        slot = best_slot;
        pending = candidate_ids[slot];
        write_center(c, pending);
        __syncthreads();  // candidate_ids and kpp_shared are rewritten by the next draw
    }
}
