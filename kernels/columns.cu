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
