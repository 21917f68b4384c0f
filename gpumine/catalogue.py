"""The built-in strategy catalogue: metadata only, implementations are imported on use.

Each entry is a :class:`~gpumine.registry.Strategy`; the GPU ones launch the
kernels of ``kernels/`` through :mod:`gpumine.kmeans.gpu`.
"""

from __future__ import annotations

from gpumine.registry import Strategy

__all__ = ["BUILTIN_STRATEGIES"]

_KMEANS = "gpumine.kmeans"
_GPU = "gpumine.kmeans.gpu"

BUILTIN_STRATEGIES = (
    Strategy(
        kind="kmeans.init", name="k-means++", backend="any",
        target=f"{_KMEANS}.init:kmeans_plusplus", paper="002 (Arthur & Vassilvitskii 2007)",
        description="greedy k-means++: 2+floor(ln k) local trials per centre, "
                    "sample_weight aware (scikit-learn semantics)",
    ),
    Strategy(
        kind="kmeans.init", name="k-means||", backend="any",
        target=f"{_KMEANS}.init:kmeans_parallel", paper="Bahmani et al. 2012",
        description="k-means||: 5 rounds each keeping every point with probability "
                    "2k w D^2 / phi, candidates weighted by their nearest points, then "
                    "k-means++ on the candidates",
    ),
    Strategy(
        kind="kmeans.init", name="random", backend="any",
        target=f"{_KMEANS}.init:random_init",
        description="k distinct points drawn with probability proportional to sample_weight",
    ),
    Strategy(
        kind="kmeans.assign", name="numpy", backend="cpu",
        target=f"{_KMEANS}.reference:assign_numpy",
        description="reference: chunked ||c||^2 - 2 x.c argmin with FP64 accumulation",
    ),
    Strategy(
        kind="kmeans.update", name="numpy", backend="cpu",
        target=f"{_KMEANS}.reference:update_numpy",
        description="reference: weighted per-cluster sums by bincount with FP64 accumulation",
    ),
    Strategy(
        kind="kmeans.assign", name="numba", backend="cpu",
        target=f"{_KMEANS}.cpu_fast:assign_numba",
        description="exact: BLAS GEMM ranking on shifted data, rows within its rounding "
                    "bound decided by the direct sum (x-c)^2 in float64; compiled with Numba, "
                    "parallel over blocks of rows (CPU default when Numba is installed)",
    ),
    Strategy(
        kind="kmeans.update", name="numba", backend="cpu",
        target=f"{_KMEANS}.cpu_fast:update_numba",
        description="per-thread float64 partial sums compiled with Numba, added in thread "
                    "order (CPU default when Numba is installed)",
    ),
    Strategy(
        kind="kmeans.assign", name="tiled", backend="gpu", target=f"{_GPU}:assign_tiled",
        paper="002 §5.5",
        description="one thread per point, centroids streamed through shared memory in "
                    "portions (any k, any d), direct sum (x-c)^2 in the data's precision; "
                    "specialized on d <= 32 with the point in registers",
    ),
    Strategy(
        kind="kmeans.assign", name="gemm", backend="gpu", target=f"{_GPU}:assign_gemm",
        description="cuBLAS x.c over row tiles, fused ||c||^2 - 2x.c argmin epilogue kernel",
    ),
    Strategy(
        kind="kmeans.assign", name="tc-exact", backend="gpu",
        target=f"{_KMEANS}.tensor_cores:assign_tc_exact",
        description="exact: split-FP16 tensor-core scores with a per-row top-2 (fused "
                    "mma.sync kernel for d <= 128, cuBLAS float32 beyond), rows whose margin "
                    "is within the rounding bound re-assigned directly; in a fit, a one-"
                    "product screen first while it decides most rows; labels equal 'tiled' "
                    "bit for bit",
    ),
    Strategy(
        kind="kmeans.assign", name="hamerly", backend="gpu",
        target=f"{_KMEANS}.bounds:hamerly", paper="Hamerly 2010", max_dims=128,
        description="exact: per point an upper bound to its centre and a lower bound to the "
                    "others, moved by the centres' shifts; points whose bounds (widened by "
                    "the rounding error) still separate are skipped, the rest scanned as "
                    "'tiled' does, or by 'tc-exact' on the tensor cores where d * k is large "
                    "and past 32 features; labels equal 'tiled' bit for bit (d <= 128; past "
                    "32, compute capability 8.0)",
    ),
    Strategy(
        kind="kmeans.assign", name="tc-fast", backend="gpu",
        target=f"{_KMEANS}.tensor_cores:assign_tc_fast",
        description="NOT exact (opt-in): FP16 (TF32 past d = 128) tensor-core labels "
                    "without the re-check; near-ties may go either way",
    ),
    Strategy(
        kind="kmeans.update", name="hybrid", backend="gpu", target=f"{_GPU}:hybrid",
        paper="000 §7, 002 §5",
        description="labels copied to the host, sums on the CPU, centroids copied back "
                    "every iteration",
    ),
    Strategy(
        kind="kmeans.update", name="irregular-reduction", backend="gpu",
        target=f"{_GPU}:update_irregular_reduction", paper="000 §6-7 (Listing 2)",
        description="per work-group: atomic id_within_cluster and cluster offsets, index "
                    "array, log2 tree per cluster; k(d+1) partial sums and the changed-points "
                    "count per group; a final kernel adds the groups",
    ),
    Strategy(
        kind="kmeans.update", name="masked-tree", backend="gpu",
        target=f"{_GPU}:update_masked_tree", paper="002 appendix",
        description="per block and cluster a masked shared-memory tree sum (`cluster`), "
                    "then halving passes (`summation`)",
    ),
    *(
        Strategy(kind="kmeans.update", name=name, backend="gpu",
                 target=f"{_GPU}:update_{name.replace('-', '_')}", paper=paper,
                 description=description)
        for name, paper, description in (
            ("gm-cl", "004 §5.1", "thread per point, divergence-safe spinlock per cluster, "
                                  "sums in global memory"),
            ("gm-dl", "004 §5.2", "thread per (point, feature), spinlock per (cluster, "
                                  "feature), global memory"),
            ("sm-cl", "004 §5.3", "clusters in shared memory in chunks with shared spinlocks, "
                                  "then one thread per block merges under GM-CL locks"),
            ("sm-dl", "004 §5.4", "SM-CL with a thread and a shared spinlock per feature"),
            ("gm-ct", "004 §5.5", "shared-nothing: a thread per cluster scans all points, "
                                  "global memory"),
            ("gm-dt", "004 §5.5", "shared-nothing: a thread per (cluster, feature), global "
                                  "memory"),
            ("sm-ct", "004 §5.5", "shared-nothing: a thread per cluster, running sums in "
                                  "shared memory"),
            ("sm-dt", "004 §5.5", "shared-nothing: a thread per (cluster, feature), running "
                                  "sums in shared memory"),
        )
    ),
    Strategy(
        kind="kmeans.update", name="atomic", backend="gpu", target=f"{_GPU}:update_atomic",
        paper="NVIDIA kmeans",
        description="shared-memory privatized atomicAdd when k(d+1) values fit a block, "
                    "else global atomics",
    ),
    Strategy(
        kind="kmeans.update", name="atomic-f64", backend="gpu",
        target=f"{_GPU}:update_atomic_f64", paper="NVIDIA kmeans",
        description="atomic with float64 block partial sums: float32 fits the same run to "
                    "run and streamed (measured), the update step up to 2x slower",
    ),
    Strategy(
        kind="kmeans.update", name="atomic-fixed", backend="gpu",
        target=f"{_GPU}:update_atomic_fixed", paper="NVIDIA kmeans",
        description="atomic with 64-bit fixed-point block partials (float32 data): exact "
                    "integer sums, the same run to run, faster than float partials on sm_90; "
                    "in a fit the sums then follow the rows each iteration moves",
    ),
    Strategy(
        kind="kmeans.update", name="gather", backend="gpu", target=f"{_GPU}:update_gather",
        description="one block per cluster scans the labels and sums its points in "
                    "registers (d <= 32): no atomics, the same sums run to run; small n*k",
        max_dims=32,
    ),
    Strategy(
        kind="wavecluster.label", name="union-find", backend="cpu",
        target="gpumine.wavecluster.labeling:label_union_find", paper="003 §3.2 (baseline)",
        description="union-find over foreground cells: hook to the smaller root, pointer "
                    "jumping, vectorized over neighbour offsets",
    ),
    Strategy(
        kind="wavecluster.label", name="scipy", backend="cpu",
        target="gpumine.wavecluster.labeling:label_scipy",
        description="scipy.ndimage.label with the matching structuring element",
    ),
    Strategy(
        kind="wavecluster.label", name="sliding-window", backend="gpu",
        target="gpumine.wavecluster.gpu:label_sliding_window", paper="003 Algorithm 2",
        description="multi-pass 2^d sliding windows (steady, right, down, ...), minimum id "
                    "propagation until no change",
        max_dims=4,
    ),
    Strategy(
        kind="wavecluster.label", name="union-find-gpu", backend="gpu",
        target="gpumine.wavecluster.gpu:label_union_find_gpu",
        description="atomic union-find, CAS hooking of the larger root: 2-d grids by "
                    "32 x 32 tiles in shared memory, then the pairs across tiles; other "
                    "grids in one pass; then path compression",
        max_dims=8,
    ),
    Strategy(
        kind="wavecluster.wavelet", name="haar", backend="any",
        target="gpumine.wavecluster.wavelet:HAAR", paper="003 Algorithm 1",
        description="2^d-block low-pass per level (PyWavelets haar, mode zero)",
    ),
    Strategy(
        kind="wavecluster.wavelet", name="bior2.2", backend="any",
        target="gpumine.wavecluster.wavelet:BIOR22", paper="WaveCluster (VLDB'98)",
        description="CDF(2,2) low-pass of the original WaveCluster paper (PyWavelets "
                    "bior2.2, mode zero)",
    ),
    Strategy(
        kind="kmeans.update", name="sort", backend="gpu", target=f"{_GPU}:update_sort",
        paper="flash-kmeans",
        description="stable sort by label, fixed-order segmented reduction; bit-reproducible",
    ),
)
