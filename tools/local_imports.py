"""Imports of detbench's own modules inside functions: `python tools/local_imports.py` lists each
with its reason and exits 1 when there are more than MAX, or when one gives no reason.

An import belongs at the top of its module. One inside a function is allowed where it avoids a
real import-time cost (torch, pandas or matplotlib for a command that does not need them, a child
process that must arm itself before torch loads), keeps a child process free of the parent's
modules, or reaches an optional dependency; its reason is a comment on its line, or on the line
above it (one comment may head a block of imports)."""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "detbench"
#: At most this many (issue 30 item 5).
MAX = 25


def _comments(text: str) -> dict[int, str]:
    """Line number -> the comment on it."""
    found: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            found[tok.start[0]] = tok.string.lstrip("#").strip()
    return found


def _is_own(node: ast.AST) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level == 0 and (node.module or "").split(".")[0] == "detbench"
    if isinstance(node, ast.Import):
        return any(a.name.split(".")[0] == "detbench" for a in node.names)
    return False


def local_imports(path: Path) -> list[tuple[int, str, str | None]]:
    """(line, the import, its reason or None) for each import of detbench inside a function of
    ``path`` (each statement once, however deep the functions nest)."""
    text = path.read_text()
    tree = ast.parse(text)
    lines = text.splitlines()
    comments = _comments(text)
    imports = {n.lineno: n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))}
    found = []

    def reason(node: ast.stmt) -> str | None:
        end = node.end_lineno or node.lineno
        for line in range(node.lineno, end + 1):  # on its own lines
            if line in comments and lines[line - 1].strip()[:1] != "#":
                return comments[line]
        line = node.lineno - 1  # above it, over the imports and blank lines of its block
        while line > 0:
            if line in comments and lines[line - 1].strip().startswith("#"):
                block = [comments[line]]  # the whole comment, however many lines
                while line - 1 in comments and lines[line - 2].strip().startswith("#"):
                    line -= 1
                    block.insert(0, comments[line])
                return " ".join(block)
            above = next((n for n in imports.values() if n.end_lineno == line), None)
            if above is not None:
                line = above.lineno - 1
            elif not lines[line - 1].strip():
                line -= 1
            else:
                return None
        return None

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if in_function and _is_own(child):
                assert isinstance(child, (ast.Import, ast.ImportFrom))
                found.append((child.lineno, ast.unparse(child), reason(child)))
            nested = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            visit(child, in_function or nested)

    visit(tree, False)
    return found


def main(root: Path = ROOT) -> int:
    bad = total = 0
    for path in sorted(root.rglob("*.py")):
        for line, statement, why in local_imports(path):
            total += 1
            where = f"{path.relative_to(root.parent)}:{line}"
            if why is None:
                bad += 1
                print(f"{where}: {statement}: no comment gives its reason")
            else:
                print(f"{where}: {statement}  # {why}")
    over = total > MAX
    print(f"{total} imports of detbench inside functions (at most {MAX}), {bad} without a reason")
    return 1 if over or bad else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT))
