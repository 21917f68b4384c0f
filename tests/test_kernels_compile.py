"""Every kernel instantiation a strategy uses compiles with nvcc for sm_90 (no GPU needed)."""

from __future__ import annotations

import importlib
import shutil
import subprocess
from collections import defaultdict

import pytest

from gpumine.catalogue import BUILTIN_STRATEGIES
from gpumine.kernels import KERNEL_DIR, declared_instantiations, kernel_sources

# every module a built-in strategy lives in declares its kernels when imported
for _module in sorted({s.target.split(":")[0] for s in BUILTIN_STRATEGIES}):
    importlib.import_module(_module)

NVCC = shutil.which("nvcc")


def test_every_source_has_declared_instantiations():
    declared = {item.source for item in declared_instantiations()}
    sources = {p.name for p in kernel_sources() if p.suffix == ".cu"}
    assert sources == declared


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("source", sorted({i.source for i in declared_instantiations()}))
def test_nvcc_compiles(source, tmp_path):
    by_source = defaultdict(list)
    for item in declared_instantiations():
        by_source[item.source].append(item)
    lines = [f'#include "{KERNEL_DIR / source}"', "void* gpumine_instantiations[] = {"]
    lines += [f"    (void*)&{item.expression}," for item in by_source[source]]
    lines.append("};")
    unit = tmp_path / f"instantiate_{source}"
    unit.write_text("\n".join(lines) + "\n")
    result = subprocess.run([NVCC, "-arch=sm_90", "-std=c++17", f"-I{KERNEL_DIR}", "-c",
                             str(unit), "-o", str(tmp_path / "out.o")],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr


def test_every_kernel_is_declared_by_a_strategy():
    """No dead kernels: each __global__ function of kernels/*.cu is launched (declared) by
    some strategy, so the compile test above builds it."""
    import re

    kernel = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\(")
    defined = {(path.name, name) for path in kernel_sources() if path.suffix == ".cu"
               for name in kernel.findall(path.read_text())}
    declared = {(item.source, item.name) for item in declared_instantiations()}
    assert defined and defined == declared, (defined - declared, declared - defined)
