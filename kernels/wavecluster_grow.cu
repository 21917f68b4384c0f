// WaveCluster's geodesic growth (gpumine.wavecluster.hierarchy.grow_labels) in one
// cooperative launch: the breadth-first steps of the host version, a grid barrier between
// steps instead of a launch and a readback each.
#include <cooperative_groups.h>
#include "common.cuh"

namespace cg = cooperative_groups;

// Each step, every unlabelled (0) cell of the region next to a labelled one takes the lowest
// label among its labelled neighbours, read from the previous step's buffer (a and b take
// turns), until a step labels nothing. A labelled neighbour that did not get its label in
// the previous step would have labelled the cell a step earlier, so this is the host's
// frontier rule. The grids are padded by one empty cell all round: cell + steps[o] stays
// inside. The step that labels nothing copies every cell, so a and b end equal.
// changed: three flags taking turns (zeroed by the caller): step s sets flag s % 3 and
// clears flag (s + 1) % 3, last read in step s - 2, before the barrier of step s - 1.
__global__ void grow_geodesic(index_t* __restrict__ a,            // INOUT (cells) labels, 0 unlabelled
                              index_t* __restrict__ b,            // INOUT (cells) a copy of a
                              const bool* __restrict__ region,    // IN  (cells) where labels may grow
                              const index_t* __restrict__ steps,  // IN  (n_steps) neighbours' flat offsets
                              int n_steps,                        // IN
                              index_t cells,                      // IN
                              int* changed)                       // INOUT (3) zeroed
{
    cg::grid_group grid = cg::this_grid();
    const index_t stride = (index_t)gridDim.x * blockDim.x;
    for (int step = 0;; ++step) {
        const index_t* src = (step & 1) ? b : a;
        index_t* dst = (step & 1) ? a : b;
        bool any = false;
        for (index_t c = (index_t)blockIdx.x * blockDim.x + threadIdx.x; c < cells; c += stride) {
            index_t v = src[c];
            if (v == 0 && region[c]) {
                for (int o = 0; o < n_steps; ++o) {
                    const index_t u = src[c + steps[o]];
                    if (u != 0 && (v == 0 || u < v)) v = u;
                }
                any = any || v != 0;
            }
            dst[c] = v;
        }
        if (any) changed[step % 3] = 1;
        if (blockIdx.x == 0 && threadIdx.x == 0) changed[(step + 1) % 3] = 0;
        grid.sync();
        if (((volatile int*)changed)[step % 3] == 0) return;
    }
}
