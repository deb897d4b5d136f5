"""The package layout holds: no import cycles, and the core never imports a paper package.

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
    assert "oscrepro.tables.runs" in graph["oscrepro.tables.plan"]
    assert "oscrepro.train" in graph["oscrepro.tables.runs"]  # imported inside source_runs()


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
