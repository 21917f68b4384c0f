"""The source folders import each other in one direction only (no cycles between folders).

The layers, bottom to top (docs/architecture.md): ``gpumine/`` (errors, backend,
validation, registry: imports no other folder) < ``kernels/`` < ``adapters/`` <
``datasets/`` < ``gpumine/kmeans``, ``gpumine/wavecluster`` < ``gpumine/dask``,
``gpumine/bench``, ``gpumine/jobs`` < ``cli/``, ``gpumine/airflow``. The package's entry
points (``gpumine/__init__.py``, lazy names; ``gpumine/__main__.py``, ``python -m
gpumine``) sit on top of everything and are left out. Every ``import`` counts, also one
inside a function: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
#: Top-level folders installed inside the gpumine namespace (pyproject's package-dir).
MAPPED = ("adapters", "cli", "kernels", "datasets")
ENTRY_POINTS = {"gpumine/__init__.py", "gpumine/__main__.py"}


def _module_folder(module: str, root: Path) -> str | None:
    """The repository folder that holds ``module`` (a dotted gpumine name), else None."""
    parts = module.split(".")
    if parts[0] != "gpumine":
        return None
    if len(parts) > 1 and parts[1] in MAPPED:
        parts = parts[1:]
    path = root.joinpath(*parts)
    while parts and not path.is_dir():
        parts = parts[:-1]
        path = root.joinpath(*parts)
    return "/".join(parts) or None


def _imports(path: Path, package: str):
    """(dotted module, line) of every import in the file at ``path`` (of ``package``)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            yield base, node.lineno
            for alias in node.names:  # ``from gpumine import registry`` names a module
                yield f"{base}.{alias.name}", node.lineno


def folder_graph(root: Path = REPO_ROOT) -> dict[tuple[str, str], list[str]]:
    """Edges (from folder, to folder) -> the ``file:line`` imports that make them."""
    edges = defaultdict(list)
    for top in ("gpumine", *MAPPED):
        for path in sorted((root / top).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            if relative in ENTRY_POINTS:
                continue
            source = path.parent.relative_to(root).as_posix()
            dotted = source.replace("/", ".")
            package = dotted if dotted.startswith("gpumine") else f"gpumine.{dotted}"
            for module, line in _imports(path, package):
                target = _module_folder(module, root)
                if target and target != source:
                    edges[source, target].append(f"{relative}:{line}")
    return edges


def cycles(edges) -> list[list[str]]:
    """The strongly connected groups of more than one folder (Tarjan)."""
    graph = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in list(graph):
        if v not in index:
            visit(v)
    return groups


def test_no_import_cycle_between_folders():
    edges = folder_graph()
    found = cycles(edges)
    detail = [f"{a} -> {b}: {where[:3]}" for (a, b), where in sorted(edges.items())
              if any(a in group and b in group for group in found)]
    assert not found, f"import cycles between folders {found}:\n" + "\n".join(detail)


def test_bottom_layer_imports_no_other_folder():
    edges = folder_graph()
    assert not [(b, where) for (a, b), where in edges.items() if a == "gpumine"]


@pytest.mark.parametrize("module", ["gpumine.jobs", "gpumine.adapters.estimator"])
def test_moved_modules_keep_their_names(module):
    import importlib

    assert importlib.import_module(module).__name__ == module


def test_the_check_finds_a_cycle(tmp_path):
    """The checker itself: two folders importing each other are reported."""
    for folder, other in (("adapters", "datasets"), ("datasets", "adapters")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "m.py").write_text(f"from gpumine.{other} import m\n")
    (tmp_path / "gpumine").mkdir()
    (tmp_path / "gpumine" / "x.py").write_text("import numpy\n")
    (tmp_path / "cli").mkdir()
    (tmp_path / "kernels").mkdir()
    assert cycles(folder_graph(tmp_path)) == [["adapters", "datasets"]]
