"""The library's layering: no import cycle among the modules of src/fedbalance (lazy imports count)."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "src" / "fedbalance"


def import_graph() -> dict[str, set[str]]:
    """module -> fedbalance modules it imports anywhere in its body (from the AST)."""
    mods = {f.stem for f in PKG.glob("*.py") if f.stem != "__init__"}
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m in mods:
        for node in ast.walk(ast.parse((PKG / f"{m}.py").read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] == "fedbalance" and len(parts) > 1 and parts[1] in mods and parts[1] != m:
                    graph[m].add(parts[1])
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_cycle_finder_sees_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle() -> None:
    graph = import_graph()
    assert {"train", "vectorised", "sgd", "monitor", "fl"} <= set(graph)
    assert "train" not in graph["vectorised"] and "sgd" in graph["vectorised"]
    assert cycles(graph) == []
