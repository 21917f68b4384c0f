"""The wheel holds every subpackage and kernel source; the installed package imports the same."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path, PurePosixPath

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SOURCE_DIRS = {"gpumine": "gpumine", "adapters": "gpumine/adapters", "cli": "gpumine/cli",
               "kernels": "gpumine/kernels", "datasets": "gpumine/datasets"}


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory):
    """Build a wheel from a copy of the source tree, with a probe .cu/.cuh in kernels/."""
    src = tmp_path_factory.mktemp("src")
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist", "*.pyc")
    for name in SOURCE_DIRS:
        shutil.copytree(REPO_ROOT / name, src / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, src / name)
    (src / "kernels" / "zz_probe.cu").write_text("// probe\n")
    (src / "kernels" / "zz_probe.cuh").write_text("// probe\n")
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(out), str(src)], check=True)
    (wheel,) = out.glob("gpumine-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def test_wheel_has_every_subpackage_and_kernel(wheel_files):
    names = set(wheel_files)
    for folder, package in SOURCE_DIRS.items():
        for path in (REPO_ROOT / folder).rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            relative = path.relative_to(REPO_ROOT / folder).as_posix()
            assert f"{package}/{relative}" in names, f"{folder}/{relative} missing from the wheel"
    for path in (REPO_ROOT / "kernels").iterdir():
        if path.suffix in (".cu", ".cuh"):
            assert f"gpumine/kernels/{path.name}" in names
    assert {"gpumine/kernels/zz_probe.cu", "gpumine/kernels/zz_probe.cuh"} <= names
    for path in (REPO_ROOT / "gpumine" / "bench" / "baselines").glob("*.json"):  # package data
        assert f"gpumine/bench/baselines/{path.name}" in names
    for path in (REPO_ROOT / "gpumine" / "tuning_tables").glob("*.json"):  # package data
        assert f"gpumine/tuning_tables/{path.name}" in names
    # no generic top-level names leak out
    tops = {PurePosixPath(n).parts[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"gpumine"}
    assert any(n.endswith("entry_points.txt") for n in names)


def test_installed_package_imports_the_same_names(wheel_files):
    packages = sorted({str(PurePosixPath(n).parent).replace("/", ".")
                       for n in wheel_files if n.endswith("/__init__.py")})
    assert set(packages) >= {"gpumine", "gpumine.adapters", "gpumine.cli", "gpumine.kernels",
                             "gpumine.datasets", "gpumine.kmeans"}
    for package in packages:
        # found, not imported: gpumine.airflow.operators imports Airflow (test_airflow.py)
        spec = importlib.util.find_spec(package)
        here = {p.name for p in Path(spec.origin).parent.glob("*.py")}
        in_wheel = {PurePosixPath(n).name for n in wheel_files
                    if str(PurePosixPath(n).parent).replace("/", ".") == package
                    and n.endswith(".py")}
        assert here == in_wheel, package


def test_console_script_runs():
    exe = shutil.which("gpumine")
    assert exe, "the gpumine console script is not on PATH"
    result = subprocess.run([exe, "--help"], capture_output=True, text=True, check=True)
    assert "cluster" in result.stdout
