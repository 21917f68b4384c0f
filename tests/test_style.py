"""ruff (configured in pyproject.toml) stays clean over the whole repository."""

import shutil
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_ruff_clean():
    ruff = shutil.which("ruff")
    assert ruff, "ruff is part of the dev extra; install with pip install -e '.[dev]'"
    result = subprocess.run([ruff, "check", str(REPO_ROOT)], capture_output=True, text=True,
                            cwd=REPO_ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
