"""The package's layout as its imports draw it: which layer (subpackage) imports which, as a Mermaid graph that
docs/design.md holds between ``<!-- layout: scripts/layout.py -->`` and ``<!-- /layout -->`` (tests/test_layout.py
checks that it is current).

    python scripts/layout.py            # print the graph
    python scripts/layout.py --write    # splice it into docs/design.md
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "src" / "fedbalance"
DESIGN = REPO / "docs" / "design.md"
MARK = "<!-- layout: scripts/layout.py -->"
END = "<!-- /layout -->"
TOP = ("atomic", "logs", "version")
"""The top-level modules every layer may import (they import none)."""


def module_name(path: Path, package: Path = PACKAGE) -> str:
    """``fedbalance.jobs.run`` for src/fedbalance/jobs/run.py (a package's ``__init__`` is the package)."""
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, package: Path = PACKAGE) -> set[str]:
    """The fedbalance modules ``path`` imports, at its top or inside a function (absolute and relative imports)."""
    name = module_name(path, package)
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "fedbalance"}
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(here[:len(here) - node.level + 1] + ([node.module] if node.module else [])) if node.level \
                else (node.module or "")
            if base.split(".")[0] == "fedbalance":
                out.add(base)
                out |= {f"{base}.{a.name}" for a in node.names}
    return out


def layer(module: str) -> str:
    """The layer of a fedbalance module: its subpackage, or the top-level module's name (``cli``, ``atomic``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "fedbalance"


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package by name."""
    return {module_name(p, package): p for p in sorted(package.rglob("*.py"))}


def graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Every module -> the package's modules it imports (a name resolved to the longest module it denotes:
    ``fedbalance.common.records.Job`` is ``fedbalance.common.records``), itself left out."""
    known = modules(package)
    out: dict[str, set[str]] = {}
    for name, path in known.items():
        out[name] = set()
        for target in imports(path, package):
            while target not in known and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in known and target != name:
                out[name].add(target)
    return out


def edges(package: Path = PACKAGE) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """(importing layer, imported layer) -> the (module, module) imports that draw it, between two layers."""
    out: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for name, targets in graph(package).items():
        for target in sorted(targets):
            a, b = layer(name), layer(target)
            if a != b and b != "fedbalance":
                out.setdefault((a, b), []).append((name, target))
    return out


def mermaid(package: Path = PACKAGE) -> str:
    """The layers and their imports as a Mermaid flowchart (an arrow: "imports"), the top-level helpers left out."""
    drawn = sorted((a, b) for a, b in edges(package)
                   if b not in TOP and a not in (*TOP, "__main__") and not b.startswith("_"))
    lines = ["```mermaid", "flowchart TD"]
    lines += [f"    {a} --> {b}" for a, b in drawn]
    return "\n".join(lines + ["```"]) + "\n"


def spliced(text: str, body: str) -> str:
    """``text`` with the layout block replaced by ``body``."""
    pattern = re.compile(rf"{re.escape(MARK)}\n.*?{re.escape(END)}", re.S)
    if not pattern.search(text):
        raise SystemExit(f"{DESIGN}: no block {MARK} … {END}")
    return pattern.sub(lambda _: f"{MARK}\n{body}{END}", text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="splice the graph into docs/design.md")
    args = parser.parse_args(argv)
    body = mermaid()
    if args.write:
        DESIGN.write_text(spliced(DESIGN.read_text(), body))
    else:
        sys.stdout.write(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
