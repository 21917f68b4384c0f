// Hamerly's bounds (assign="hamerly", Hamerly 2010): exact labels that skip the distance
// computations of points whose nearest centre cannot have changed. X is column-major:
// feature j of point i at XT[j * n + i].
//
// Per point, an upper bound u on the true distance to its centre a and a lower bound l on
// the true distance to every other centre (Euclidean, not squared, so that a centre's move
// by delta changes them by at most delta: u += delta_a, l -= max_{j != a} delta_j). The
// labels must be assign_tiled's bit for bit, and tiled compares direct distances D^ in T,
// which satisfy |D^ - D| <= kappa D + eta (kappa: gpumine.kmeans.tensor_cores's kappa_d;
// eta: an absolute floor for underflow). So a point is skipped only when
//     (1 + kappa) u^2 + eta < (1 - kappa) l^2 - eta,
// for then D^_a <= (1 + kappa) D_a + eta < (1 - kappa) D_j - eta <= D^_j for every j != a
// and tiled picks a, strictly. A point that fails the test gets u tightened to its true
// distance to a (Hamerly's second test) and is tested again. Every other point is queued and
// scanned against all centres
// with assign_registers' arithmetic (the same values, the same label), which also gives new
// bounds from its best and second-best D^ (u^2 = (D^_1 + eta) / (1 - kappa),
// l^2 = (D^_2 - eta) / (1 + kappa)). Bounds are kept in float, rounded outward, and every
// double computation gets a relative slack of 2^-40 on top.
#include "common.cuh"
#include "kmeans_direct.cuh"

// How far each centre moved (true Euclidean distance, rounded up), and the new centres
// copied into `previous`: a warp a centre (one block for every centre was 0.11 ms a call at
// k = 1024, d = 32 on the H200, 4 % of a steady hamerly iteration at 10M x 32; record
// hamerly-calls-a0ae3e2-tensor-h200.json). With *request set (a fresh fit, or labels moved
// outside the assignment, e.g. an empty cluster relocated) every move is 0 (bounds_shifts
// then sets *force).
template <typename T, int BLOCK>
__global__ void __launch_bounds__(BLOCK)
bounds_moved(const T* __restrict__ centers,      // IN  (k, d) this call's centres
             T* __restrict__ previous,           // INOUT (k, d) the last call's, then these
             int k, int d,                       // IN
             const int* __restrict__ request,    // IN  (1) full scan requested
             double* __restrict__ shift)         // OUT (k) each centre's move, rounded up
{
    const int lane = threadIdx.x & (kWarpSize - 1);
    const int c = (int)(((index_t)blockIdx.x * BLOCK + threadIdx.x) / kWarpSize);
    if (c >= k) return;  // whole warps
    double moved2 = 0.0;
    for (int j = lane; j < d; j += kWarpSize) {
        const index_t e = (index_t)c * d + j;
        const double diff = (double)centers[e] - (double)previous[e];
        moved2 = fma(diff, diff, moved2);
        previous[e] = centers[e];
    }
    for (int offset = kWarpSize / 2; offset > 0; offset >>= 1)
        moved2 += __shfl_down_sync(0xffffffffu, moved2, offset);
    if (lane == 0) shift[c] = *request != 0 ? 0.0 : sqrt(moved2) * (1.0 + 0x1p-40);
}

// The largest and second-largest move (bounds_moved) and the index of the largest. One
// block. With *request set it sets *force for the filter (every point scanned) and clears
// the request.
template <int BLOCK>
__global__ void __launch_bounds__(BLOCK)
bounds_shifts(const double* __restrict__ shift,   // IN  (k) each centre's move
              int k,                              // IN
              double* __restrict__ stats,         // OUT (3) largest, second largest, argmax
              int* __restrict__ request,          // INOUT (1) full scan requested; cleared
              int* __restrict__ force)            // OUT (1) this call scans every point
{
    __shared__ ValueIndex reduce_pair[BLOCK / kWarpSize];
    __shared__ double reduce_value[BLOCK / kWarpSize];
    const bool full = *request != 0;
    ValueIndex largest = {-1.0, 0x7fffffff};
    for (int c = threadIdx.x; c < k; c += BLOCK)
        largest = ArgMax()(largest, ValueIndex{shift[c], c});
    largest = block_all_reduce<BLOCK>(largest, reduce_pair, ArgMax());
    double second = -1.0;
    for (int c = threadIdx.x; c < k; c += BLOCK)
        if (c != largest.index) second = fmax(second, shift[c]);
    second = block_all_reduce<BLOCK>(second, reduce_value, FMax());
    __syncthreads();  // every thread has read *request
    if (threadIdx.x == 0) {
        stats[0] = fmax(largest.value, 0.0);
        stats[1] = fmax(second, 0.0);
        stats[2] = (double)largest.index;
        *force = full ? 1 : 0;
        *request = 0;
    }
}

// An upper bound on the squared distance of a point (column-major: feature j at
// column[j * n]) to its own centre (a row of d values): the filter's tightening. Float data:
// the distance D^ computed in float as assign_tiled computes it (the difference, then an FMA
// a feature), whose error |D^ - D| <= kappa D + eta (the bound's own terms) gives
// D <= (D^ + eta) / (1 - kappa); where a double computation of the same took a conversion of
// every value to double (the XU pipe, a quarter of the FMA pipe's rate: 38 % of the filter's
// issue slots at 10M x 32, k = 1024 on the H200, ncu-listed-hamerly-*-h200-82645d5). A
// non-finite D^ gives no bound (+inf or NaN: the point is queued). Double data: in double
// (within the filter's 2^-40 slack). The centre's row is read 16 bytes at a time where it is
// aligned (16-byte address; float: d a multiple of 4, double: of 2), the point's values
// unrolled so that their loads are in flight together.
template <typename T> struct Vec16;
template <> struct Vec16<float> { using type = float4; };
template <> struct Vec16<double> { using type = double2; };

// `sum` plus the squared differences of the values x(0), ..., x(V - 1) and the centre's
// 16-byte word at `word` (V values, read through the read-only cache), one FMA a value in
// order: own_distance2's step in both of its vector paths (x: the row's values, in
// registers or loaded as they are used)
template <typename T, typename Values>
__device__ __forceinline__ T add_word(const typename Vec16<T>::type* __restrict__ word,
                                      Values x, T sum) {
    constexpr int V = 16 / sizeof(T);  // values a 16-byte load
    const typename Vec16<T>::type c = __ldg(word);
    const T* cv = reinterpret_cast<const T*>(&c);
#pragma unroll
    for (int v = 0; v < V; ++v) {
        const T diff = x(v) - cv[v];
        sum = fma(diff, diff, sum);
    }
    return sum;
}

template <typename T>
__device__ __forceinline__ T own_distance2(const T* __restrict__ column, index_t n,
                                           const T* __restrict__ centre, int d) {
    constexpr int V = 16 / sizeof(T);  // values a 16-byte load
    using Vec = typename Vec16<T>::type;
    const bool words = (reinterpret_cast<unsigned long long>(centre) & 15ull) == 0;
    T sum = 0;
    // 32 values of the row loaded before the first is used: the filter at 10M x 32,
    // k = 1024 on the H200 494 -> 464 us under ncu (eight at a time before; records
    // ncu-filter-{old,new}-h200-7547c64.txt.gz, hamerly-ab-filter-chunk32-7547c64-*)
    constexpr int CHUNK = 32;
    if (words && d % CHUNK == 0) {
        for (int q0 = 0; q0 < d; q0 += CHUNK) {
            T x[CHUNK];
#pragma unroll
            for (int j = 0; j < CHUNK; ++j) x[j] = column[(index_t)(q0 + j) * n];
            const Vec* row = reinterpret_cast<const Vec*>(centre + q0);
#pragma unroll
            for (int q = 0; q < CHUNK / V; ++q)
                sum = add_word<T>(row + q, [&](int v) { return x[q * V + v]; }, sum);
        }
        return sum;
    }
    if (words && d % V == 0) {
        const Vec* row = reinterpret_cast<const Vec*>(centre);
#pragma unroll 2
        for (int q = 0; q < d / V; ++q)
            sum = add_word<T>(row + q, [&](int v) { return column[(index_t)(q * V + v) * n]; },
                              sum);
        return sum;
    }
#pragma unroll 4
    for (int j = 0; j < d; ++j) {
        const T diff = column[(index_t)j * n] - centre[j];
        sum = fma(diff, diff, sum);
    }
    return sum;
}

template <typename T>
__device__ __forceinline__ double own_upper2(const T* __restrict__ column, index_t n,
                                             const T* __restrict__ centre, int d,
                                             double kappa, double eta) {
    const T computed = own_distance2(column, n, centre, d);
    if (sizeof(T) == sizeof(double)) return (double)computed;
    return ((double)computed + eta) / (1.0 - kappa);
}

// The bounds test of every point: skipped points keep their label and get their moved
// bounds; the others are appended to `queue` (a block reserves its slots with one atomic
// per BLOCK points: one per warp on the one counter measured slower than the test itself).
// A point that fails the test first gets its upper bound tightened to its distance to its
// own centre (Hamerly's second test: own_upper2, a bound on the true distance) and is
// skipped if that separates it.
// With `queue_labels` (the scan on tensor cores, gpumine.kmeans.bounds.BoundAssign), a
// queued point also gets bounds that hold whatever label the exact assignment then gives
// it, and its label is kept beside its slot (the scan's moves: bounds_moves). The scan
// writes new bounds only for the points whose top-2 it decides; the points it leaves to
// the direct re-check keep these. With the moved u >= D_a^(1/2) and l <= D_j^(1/2) for
// every j != a, a label b picked by the computed distances (D^_b <= D^_a, |D^ - D| <=
// kappa D + eta) has D_b <= ((1 + kappa) D_a + 2 eta) / (1 - kappa), and every j != b
// (a included: D_a >= ((1 - kappa) D_b - 2 eta) / (1 + kappa), D_b >= l^2 where b != a)
// has D_j >= ((1 - kappa) l^2 - 2 eta) / (1 + kappa): those are the bounds written. A
// full scan writes u = +inf and l = 0 (nothing known).
template <typename T, int BLOCK>
__global__ void __launch_bounds__(BLOCK)
bounds_filter(const T* __restrict__ XT,           // IN  (d, n)
                              const T* __restrict__ centers,      // IN  (k, d)
                              int d,                              // IN
                              const int* __restrict__ labels,     // IN  (n)
                              const double* __restrict__ shift,   // IN  (k)
                              const double* __restrict__ stats,   // IN  (3) bounds_shifts
                              const int* __restrict__ force,      // IN  (1)
                              const double* __restrict__ bound,   // IN  (2) kappa, eta
                              index_t n,                          // IN
                              float* __restrict__ upper,          // INOUT (n)
                              float* __restrict__ lower,          // INOUT (n)
                              unsigned* __restrict__ queue_size,  // INOUT (1) zeroed before
                              index_t* __restrict__ queue,        // OUT (n)
                              int* __restrict__ queue_labels)     // OUT (n) or null: the
                                                                  //   queued points' labels
{
    __shared__ unsigned warp_first[BLOCK / kWarpSize];
    __shared__ unsigned block_first;
    const bool full = *force != 0;
    const double kappa = bound[0], eta = bound[1];
    const int far = (int)stats[2];
    const int lane = threadIdx.x & (kWarpSize - 1), warp = threadIdx.x / kWarpSize;
    for (index_t base = (index_t)blockIdx.x * blockDim.x; base < n;
         base += (index_t)gridDim.x * blockDim.x) {  // uniform across the warp
        const index_t i = base + threadIdx.x;
        const bool keep = queue_labels != nullptr;  // the queued points' bounds, labels
        bool scan = false;
        int a = 0;
        if (i < n) {
            scan = full;
            if (keep) a = labels[i];
            if (full && keep) {
                upper[i] = __int_as_float(0x7f800000);  // +inf
                lower[i] = 0.0f;
            }
            if (!full) {
                a = labels[i];
                double u = (double)upper[i] + shift[a];
                const double l = (double)lower[i] - (a == far ? stats[1] : stats[0]);
                const double l_test = (1.0 - kappa) * l * l - eta;
                scan = !((1.0 + kappa) * u * u + eta < l_test && l > 0.0);
                if (scan && l > 0.0) {
                    u = sqrt(own_upper2(XT + i, n, centers + (index_t)a * d, d, kappa, eta))
                        * (1.0 + 0x1p-40);
                    scan = !((1.0 + kappa) * u * u + eta < l_test);
                }
                if (!scan) {
                    upper[i] = bound_up(u);
                    lower[i] = bound_down(l);
                } else if (keep) {  // bounds for any label the exact assignment gives
                    upper[i] = bound_up(sqrt(((1.0 + kappa) * u * u + 2.0 * eta)
                                             / (1.0 - kappa)) * (1.0 + 0x1p-40));
                    lower[i] = l > 0.0 ? bound_down(sqrt(fmax((1.0 - kappa) * l * l - 2.0 * eta,
                                                              0.0) / (1.0 + kappa))
                                                    * (1.0 - 0x1p-40))
                                       : 0.0f;
                }
            }
        }
        const unsigned ballot = __ballot_sync(0xffffffffu, scan);
        if (lane == 0) warp_first[warp] = (unsigned)__popc(ballot);
        __syncthreads();
        if (threadIdx.x == 0) {  // the warps' counts into offsets, and the block's slots
            unsigned total = 0;
            for (int w = 0; w < BLOCK / kWarpSize; ++w) {
                const unsigned count = warp_first[w];
                warp_first[w] = total;
                total += count;
            }
            block_first = total ? atomicAdd(queue_size, total) : 0u;
        }
        __syncthreads();
        if (scan) {
            const unsigned slot = block_first + warp_first[warp]
                                  + __popc(ballot & ((1u << lane) - 1u));
            queue[slot] = i;
            if (keep) queue_labels[slot] = a;
        }
        __syncthreads();  // the offsets are read before the next points overwrite them
    }
}

// The moves of the scan on tensor cores (which counts changed labels but lists none): each
// queued point whose label differs from the one bounds_filter kept beside its slot, as
// (row, old label) for update="atomic-fixed"'s incremental sums (bounds_scan's list).
__global__ void __launch_bounds__(256)
bounds_moves(const unsigned* __restrict__ queue_size,  // IN  (1)
             const index_t* __restrict__ queue,        // IN  queued rows
             const int* __restrict__ queue_labels,     // IN  their labels before the scan
             const int* __restrict__ labels,           // IN  (n) after it
             unsigned* moves_count,                    // INOUT (1) zeroed before
             unsigned move_capacity,                   // IN  entries of the two below
             index_t* __restrict__ move_rows,          // OUT (move_capacity) moved rows
             int* __restrict__ move_from)              // OUT (move_capacity) old labels
{
    const index_t size = *queue_size;
    for (index_t base = (index_t)blockIdx.x * blockDim.x; base < size;
         base += (index_t)gridDim.x * blockDim.x) {  // uniform across the warp
        const index_t q = base + threadIdx.x;
        const index_t row = q < size ? queue[q] : -1;
        const int previous = q < size ? queue_labels[q] : 0;
        const bool moved = q < size && labels[row] != previous;
        record_move(moved, row, previous, moves_count, move_capacity, move_rows, move_from);
    }
}

// The queued points, PPT a thread, against every centre: assign_registers' loop (centres
// staged KT at a time, the points in registers, the same values and label), keeping the
// second-best distance too for the new lower bound. A fixed grid strides over *queue_size
// in chunks of BLOCK * PPT (no host read of the count). Full tiles of centres run without
// the per-centre check that keeps padded centres out (an ISETP, a branch and the tile's
// address again per centre: 5 of 21 instructions a pair at d = 4, ncu on the H200); the
// steady iteration of hamerly fits 0.150 -> 0.123 ms at 1M x 4 x 400, 20.5 -> 17.4 ms at
// 10M x 32 x 1024 (benchmarks/results/bounds-scan-ab-h200-2026-11-28-c15bc92.txt, where
// giving every block an equal share of the queue was slower). With moves_count set, every
// point whose label changed is also listed as (row, old label) for update="atomic-fixed"'s
// incremental sums (gpumine.kmeans.gpu's _TrackedFixed); past move_capacity only counted.
// Shared memory: KT * DMAX elements.
template <typename T, int DMAX, int PPT>
__device__ __forceinline__ void scan_centre(const T (&x)[PPT][DMAX],  // IN  the points
                                            const T* center,           // IN  (DMAX) shared
                                            int index,                 // IN  its number
                                            T (&best)[PPT], T (&second)[PPT],  // INOUT
                                            int (&best_index)[PPT]) {  // INOUT
#pragma unroll
    for (int p = 0; p < PPT; ++p) {
        const T acc = padded_squared_distance<T, DMAX>(x[p], center);
        second[p] = min(second[p], max(best[p], acc));
        if (acc < best[p]) {
            best[p] = acc;
            best_index[p] = index;
        }
    }
}

template <typename T, int KT, int DMAX, int PPT>
__global__ void __launch_bounds__(GPUMINE_BLOCK)
bounds_scan(const T* __restrict__ XT,                  // IN  (d, n)
            const T* __restrict__ centers,             // IN  (k, d)
            const double* __restrict__ bound,          // IN  (2) kappa, eta
            index_t n, int d, int k,                   // IN  d <= DMAX
            const unsigned* __restrict__ queue_size,   // IN  (1)
            const index_t* __restrict__ queue,         // IN  queued rows
            int* __restrict__ labels,                  // INOUT (n)
            float* __restrict__ upper,                 // OUT (n) queued rows
            float* __restrict__ lower,                 // OUT (n) queued rows
            unsigned long long* changed,               // INOUT (1) or null
            unsigned* moves_count,                     // INOUT (1) zeroed before, or null
            unsigned move_capacity,                    // IN  entries of the two below
            index_t* __restrict__ move_rows,           // OUT (move_capacity) moved rows
            int* __restrict__ move_from)               // OUT (move_capacity) their old labels
{
    extern __shared__ unsigned char shared_raw[];
    T* tile = reinterpret_cast<T*>(shared_raw);
    const double kappa = bound[0], eta = bound[1];
    const index_t size = *queue_size;
    for (index_t base = (index_t)blockIdx.x * blockDim.x * PPT; base < size;
         base += (index_t)gridDim.x * blockDim.x * PPT) {  // uniform across the block
        T x[PPT][DMAX], best[PPT], second[PPT];
        int best_index[PPT];
        index_t row[PPT];
#pragma unroll
        for (int p = 0; p < PPT; ++p) {
            const index_t q = base + (index_t)p * blockDim.x + threadIdx.x;
            row[p] = q < size ? queue[q] : -1;
            load_padded_point<T, DMAX>(XT, n, d, row[p], row[p] >= 0, x[p]);
            best[p] = second[p] = max_value<T>();
            best_index[p] = 0;
        }
        for (int k0 = 0; k0 < k; k0 += KT) {
            const int kc = min(KT, k - k0);
            stage_padded_tile<T, KT, DMAX>(centers, k0, kc, d, tile);
            if (kc == KT) {  // uniform: a full tile, every centre real
#pragma unroll 8
                for (int c = 0; c < KT; ++c)
                    scan_centre<T, DMAX, PPT>(x, tile + c * DMAX, k0 + c, best, second,
                                              best_index);
            } else {  // the last tile: padded centres must not become the second best
                for (int c = 0; c < kc; ++c)
                    scan_centre<T, DMAX, PPT>(x, tile + c * DMAX, k0 + c, best, second,
                                              best_index);
            }
        }
#pragma unroll
        for (int p = 0; p < PPT; ++p) {
            const bool active = row[p] >= 0;
            if (active) {
                upper[row[p]] = bound_up(sqrt(((double)best[p] + eta) / (1.0 - kappa)));
                // k = 1: no other centre, the bound stays infinite
                lower[row[p]] = k == 1 ? __int_as_float(0x7f800000)
                    : bound_down(sqrt(fmax((double)second[p] - eta, 0.0) / (1.0 + kappa)));
            }
            const int previous = active ? labels[row[p]] : 0;
            const bool moved = write_label(labels, row[p], active, best_index[p], previous);
            count_moved(moved, changed);
            if (moves_count != nullptr)
                record_move(moved, row[p], previous, moves_count, move_capacity, move_rows,
                            move_from);
        }
    }
}
