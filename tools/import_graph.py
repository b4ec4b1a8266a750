"""Every import between detbench's modules, inside functions too (not under TYPE_CHECKING):
the cycles, the imports that point up the layers, an import of another module's private name
(``from detbench.x import _helper``), and two classes of one name in two modules.
`python tools/import_graph.py` exits 1 if it finds any. import-linter (`make lint`) enforces the
layers; this script also names cycles inside a layer, which a layers contract does not see.

A module's length is not checked: a module holds one concern, whatever its length, and is split
by concern, never to meet a line count."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "detbench"
LAYERS = ["core", "store", "worker", "distributed", "run", "analysis", "locate", "report", "cli"]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, modules: set[str]) -> set[str]:
    tree = ast.parse(path.read_text())
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for child in node.body for n in ast.walk(child))
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name.startswith("detbench"):
                found.add(name)
    return found


def private_imports(path: Path) -> list[str]:
    """``module.name`` of each private name ``path`` imports from another detbench module."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("detbench"):
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__"):
                    out.append(f"{node.module}.{a.name}")
    return out


def classes(path: Path) -> list[str]:
    return [n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ClassDef)]


def layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def main() -> int:
    paths = {module_name(p): p for p in ROOT.rglob("*.py")}
    graph = {m: imports(p, set(paths)) - {m} for m, p in paths.items()}
    bad = 0
    for m, deps in sorted(graph.items()):
        for d in sorted(deps):
            lm, ld = layer(m), layer(d)
            if lm is not None and ld is not None and ld > lm:
                print(f"upward: {m} -> {d}")
                bad += 1
    # cycles: Tarjan's strongly connected components (package __init__ re-exports excluded)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    sccs: list[list[str]] = []
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if paths[w].name == "__init__.py":
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    for comp in sccs:
        print("cycle:", " <-> ".join(comp))
        bad += 1
    for m, p in sorted(paths.items()):
        for name in private_imports(p):
            print(f"private name imported: {m} imports {name}")
            bad += 1
    defined: dict[str, list[str]] = {}
    for m, p in sorted(paths.items()):
        for name in classes(p):
            defined.setdefault(name, []).append(m)
    for name, where in sorted(defined.items()):
        if len(where) > 1:
            print(f"class {name} defined in {len(where)} modules: {', '.join(where)}")
            bad += 1
    edges = sum(map(len, graph.values()))
    print(f"{len(paths)} modules, {edges} imports between them, {bad} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
