"""Where a line of the user's source sits in a Python loop: the ``for`` statement or comprehension around it, read
from the file's syntax tree (rules place a finding on the loop that repeats an operation, not only on the line)."""

from __future__ import annotations

import ast
import functools
import os

COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


def enclosing_loop(path: str, line: int) -> int | None:
    """The line of the innermost ``for`` loop whose body holds ``line`` (or of the comprehension on it); None where
    the line is in no loop, or the file cannot be read."""
    try:
        stamp = os.stat(path).st_mtime_ns
    except OSError:
        return None
    found = None
    for start, first, last in _loops(path, stamp):
        if first <= line <= last and (found is None or start >= found):
            found = start
    return found


@functools.lru_cache(maxsize=64)
def _loops(path: str, stamp: int) -> tuple[tuple[int, int, int], ...]:
    """(the loop's line, the first and last line it repeats) of every loop in the file."""
    try:
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), filename=path)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return ()
    loops = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.AsyncFor)) and node.body:
            loops.append((node.lineno, node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno))
        elif isinstance(node, COMPREHENSIONS):
            loops.append((node.lineno, node.lineno, node.end_lineno or node.lineno))
    return tuple(loops)
