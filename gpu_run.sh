#!/usr/bin/env bash
# one device call: install, the WaveCluster GPU tests, the auto-cost benchmark on the GPU
set -u
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export GPUMINE_COMMIT=${GPUMINE_COMMIT:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_wavecluster_hierarchy.py \
  tests/test_wavecluster_gpu.py tests/test_wavecluster.py tests/test_kernels_compile.py -k "not nvcc_compiles or wavecluster" \
  --junitxml=$OUT/junit-wavecluster-$GPUMINE_COMMIT.xml 2>&1 | tail -5
timeout 200 python3 benchmarks/wavecluster_auto_cost.py --device gpu --out $OUT --tag=-h100 2>&1 | tail -25
