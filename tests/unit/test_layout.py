"""The package layout holds: no import cycles between modules or between packages, the layers import only
downwards (the runs layer below training and the table engine), and the core never imports a paper package.

The import graph is built from the source with ``ast`` (every ``import`` / ``from ... import``, at module level or
inside functions, between ``oscrepro`` modules), so a lazy import inside a function counts as an edge too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "oscrepro"


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the oscrepro modules it imports (a package import points at the package's __init__)."""
    modules = {module_name(p): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from pkg import sub` imports the submodule when one exists, else a name of pkg
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                           for a in node.names]
            for t in targets:
                while t and t not in modules:  # `import a.b.c` of a name inside a.b -> a.b
                    t = t.rpartition(".")[0]
                if t.startswith("oscrepro") and t != mod and t != "oscrepro":
                    graph[mod].add(t)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state and (cycle := visit(n)):
                return cycle
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (cycle := visit(m)):
            return cycle
    return None


def test_graph_builder_sees_edges_and_cycles():
    """The checker itself can fail: it finds a planted cycle and a lazy (function-level) import."""
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    graph = import_graph()
    assert "oscrepro.runs.lookup" in graph["oscrepro.tables.plan"]
    assert "oscrepro.train" in graph["oscrepro.tables.runs"]  # imported inside source_runs()
    assert package_graph({"oscrepro.a.x": {"oscrepro.b.y"}, "oscrepro.b.y": {"oscrepro.a.z"}}) == {
        "oscrepro.a": {"oscrepro.b"}, "oscrepro.b": {"oscrepro.a"}}


def package(module: str) -> str:
    """The layer a module belongs to: ``oscrepro.<first>`` (``oscrepro.table``, ``oscrepro.train`` are their own)."""
    return ".".join(module.split(".")[:2])


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """package -> the other packages its modules import (function-level imports included)."""
    out: dict[str, set[str]] = {}
    for mod, targets in graph.items():
        out.setdefault(package(mod), set()).update(package(t) for t in targets if package(t) != package(mod))
    return out


def test_no_cycles_between_packages():
    """A cycle between packages (``train`` -> ``tables`` -> ``train`` through a lazy import) makes every change a
    two-package change; none is left, counting imports inside functions."""
    cycle = find_cycle(package_graph(import_graph()))
    assert cycle is None, "package cycle: " + " -> ".join(cycle or [])


# Layers, bottom to top: a package may import only packages of lower layers (or its own).
LAYERS = [
    {"oscrepro.utils"},
    {"oscrepro.data", "oscrepro.attention"},
    {"oscrepro.runs"},
    {"oscrepro.models", "oscrepro.analysis"},
    {"oscrepro.tasks"},
    {"oscrepro.train"},
    {"oscrepro.bench", "oscrepro.tables"},
    {"oscrepro.claims", "oscrepro.leaderboard"},
    {"oscrepro.table", "oscrepro.report"},
    {"oscrepro.papers"},
]


def test_layers_import_only_downwards():
    rank = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}
    graph = package_graph(import_graph())
    unknown = sorted(set(graph) - set(rank) - {"oscrepro"})
    assert not unknown, f"packages without a layer in LAYERS: {unknown}"
    upward = sorted(f"{a} -> {b}" for a, ts in graph.items() for b in ts
                    if a in rank and b in rank and rank[b] > rank[a])
    assert not upward, f"imports against the layering: {upward}"


def test_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_core_never_imports_papers():
    bad = {m: sorted(t for t in ts if t.startswith("oscrepro.papers"))
           for m, ts in import_graph().items() if not m.startswith("oscrepro.papers")}
    assert not {m: ts for m, ts in bad.items() if ts}


@pytest.mark.parametrize("key", sorted(p.name for p in (ROOT / "papers").iterdir() if p.is_dir()
                                       and not p.name.startswith("_")))
def test_every_paper_package_has_an_index(key):
    """Each paper package has a README that names every spec of conf/table/<key>/ (the three-hop index)."""
    readme = ROOT / "papers" / key / "README.md"
    assert readme.exists(), f"{readme} missing"
    text = readme.read_text()
    specs = sorted((ROOT.parent / "conf" / "table" / key).glob("*.yaml"))
    missing = [p.name for p in specs if f"conf/table/{key}/{p.name}" not in text]
    assert not missing, f"{readme} does not index {missing}"


def _links(md: Path) -> list[str]:
    import re

    return [t for t in re.findall(r"\]\(([^)\s]+)\)", md.read_text()) if not t.startswith(("http://", "https://", "#"))]


@pytest.mark.parametrize("md", ["README.md", "results/README.md", "oscrepro/papers/README.md"])
def test_readme_links_resolve(md):
    """Every relative link of the README map (and of the findings and placement pages) points at a file."""
    path = ROOT.parent / md
    broken = [t for t in _links(path) if not (path.parent / t.split("#")[0]).exists()]
    assert not broken, f"{md}: broken links {broken}"


def test_readme_links_every_paper_index():
    """The README is the map: it links each paper's index (three hops README -> index -> spec/code/test)."""
    linked = set(_links(ROOT.parent / "README.md"))
    papers = sorted(p.name for p in (ROOT / "papers").iterdir() if p.is_dir() and not p.name.startswith("_"))
    missing = [k for k in papers if f"oscrepro/papers/{k}/README.md" not in linked]
    assert not missing, f"README.md links no index for {missing}"
