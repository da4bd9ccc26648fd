"""The size of the gateway's code, per folder: all lines (what `wc -l` counts), and the
lines of code alone (no docstring, comment or blank line), for docs/architecture.md,
"Size". `python scripts/line_count.py [FOLDER ...]` (default: gateway adapters policies)."""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from pathlib import Path

NOT_CODE = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
HAS_DOCSTRING = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def code_lines(source: str) -> int:
    """The lines holding a token of code, a docstring's lines left out."""
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, HAS_DOCSTRING) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str):
                    docstrings.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in NOT_CODE:
            lines.update(n for n in range(tok.start[0], tok.end[0] + 1) if n not in docstrings)
    return len(lines)


def main(folders: list[str]) -> None:
    total = code = 0
    for folder in folders:
        sources = [p.read_text() for p in sorted(Path(folder).rglob("*.py"))]
        lines, lines_of_code = sum(s.count("\n") for s in sources), sum(code_lines(s) for s in sources)
        print(f"{folder}: {lines} lines, {lines_of_code} of code")
        total, code = total + lines, code + lines_of_code
    print(f"total: {total} lines, {code} of code")


if __name__ == "__main__":
    main(sys.argv[1:] or ["gateway", "adapters", "policies"])
