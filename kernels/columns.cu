// Per-feature statistics of a (d, n) column buffer, accumulated in double, for the checks and
// the centring every fit starts with (adapters/column_stats.py).
#include "common.cuh"

// Partial sums of every column: block (b, j) adds rows b*BLOCK + t, b*BLOCK + t + gridDim.x*BLOCK,
// ... of column j. A NaN or an infinity in a column makes its sums NaN or infinite.
template <typename T, int BLOCK>
__global__ void __launch_bounds__(BLOCK)
column_sums(const T* __restrict__ XT,          // IN  (d, n)
            index_t n,                         // IN
            double* __restrict__ partial)      // OUT (d, gridDim.x)
{
    __shared__ double reduce_value[BLOCK / kWarpSize];
    const T* column = XT + (index_t)blockIdx.y * n;
    double total = 0.0;
    for (index_t i = (index_t)blockIdx.x * BLOCK + threadIdx.x; i < n;
         i += (index_t)gridDim.x * BLOCK) {
        total += (double)column[i];
    }
    total = block_all_reduce<BLOCK>(total, reduce_value, Add());
    if (threadIdx.x == 0) partial[(index_t)blockIdx.y * gridDim.x + blockIdx.x] = total;
}

// out[j] = (partial[j, 0] + partial[j, 1] + ...) / divisor, added in that order by one thread
// per row: the same value run to run (no atomics, no launch-dependent order).
__global__ void divided_row_sums(const double* __restrict__ partial,  // IN  (rows, columns)
                                 int rows, int columns,               // IN
                                 double divisor,                      // IN
                                 double* __restrict__ out)            // OUT (rows)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= rows) return;
    const double* row = partial + (index_t)j * columns;
    double total = 0.0;
    for (int b = 0; b < columns; ++b) total += row[b];
    out[j] = total / divisor;
}

// out = in transposed: (rows, cols) -> (cols, rows), both C-contiguous, through 32 x 32 tiles
// in shared memory, so that a warp reads 32 consecutive elements of an input row and writes 32
// consecutive elements of an output row (a copy that reads or writes across rows reads 32
// cache lines a warp). Block (32, 8); block (x, y) holds rows 32x.. and columns 32y.. (rows in
// grid.x: up to 2^31 - 1 blocks). The tile's row is padded by one element: a column of it
// falls on 32 banks.
template <typename T>
__global__ void __launch_bounds__(256)
transpose_tiles(const T* __restrict__ in,      // IN  (rows, cols)
                index_t rows, index_t cols,    // IN
                T* __restrict__ out)           // OUT (cols, rows)
{
    __shared__ T tile[32][33];
    const index_t r0 = (index_t)blockIdx.x * 32, c0 = (index_t)blockIdx.y * 32;
    for (int y = threadIdx.y; y < 32; y += 8) {
        const index_t r = r0 + y, c = c0 + threadIdx.x;
        if (r < rows && c < cols) tile[y][threadIdx.x] = in[r * cols + c];
    }
    __syncthreads();
    for (int y = threadIdx.y; y < 32; y += 8) {
        const index_t c = c0 + y, r = r0 + threadIdx.x;
        if (c < cols && r < rows) out[c * rows + r] = tile[threadIdx.x][y];
    }
}

// In place, x - by[j] (negative) or x + by[j] for every value x of feature j of a (d, n)
// buffer: the fit's centring of a column-major X and its restoring, the same arithmetic as
// CuPy's broadcast `XT -= by[:, None]` (the same bits), which computes each element's
// broadcast index by divisions and ran at about a third of the bandwidth. Block (x, y) takes
// a grid-stride share of feature y's values, four of them in flight a thread (256 apart, so
// a warp's accesses stay contiguous); features past grid.y in steps of it.
template <typename T>
__global__ void __launch_bounds__(256)
shift_columns(T* __restrict__ XT,              // INOUT (d, n)
              const T* __restrict__ by,        // IN    (d)
              index_t n, int d,                // IN
              int negative)                    // IN    1: subtract, 0: add
{
    constexpr int BLOCK = 256, AHEAD = 4;
    for (int j = blockIdx.y; j < d; j += gridDim.y) {
        T* column = XT + (index_t)j * n;
        const T b = by[j];
        for (index_t i0 = (index_t)blockIdx.x * BLOCK * AHEAD + threadIdx.x; i0 < n;
             i0 += (index_t)gridDim.x * BLOCK * AHEAD) {
            T v[AHEAD];
#pragma unroll
            for (int q = 0; q < AHEAD; ++q) {
                const index_t i = i0 + (index_t)q * BLOCK;
                if (i < n) v[q] = column[i];
            }
#pragma unroll
            for (int q = 0; q < AHEAD; ++q) {
                const index_t i = i0 + (index_t)q * BLOCK;
                if (i < n) column[i] = negative ? v[q] - b : v[q] + b;
            }
        }
    }
}
