"""Changes made to a parsed file, all at once: each replaces a node of the tree as it was parsed (so one
edit never moves another's place), and statements are added after the imports."""

from __future__ import annotations

from typing import Any

from advisor.patch.codemods import Change, Source
from advisor.patch.cst_nodes import after_imports_index


def overlapping(kept: list[Change], change: Change) -> Change | None:
    """The kept change of the same file whose lines this one's overlap (two edits of one statement)."""
    for other in kept:
        if other.path != change.path:
            continue
        if change.insert or other.insert:
            continue  # lines added after the imports: merged with any other, and before every statement
        if (change.node is other.node and change.keywords and other.keywords
                and not set(change.keywords) & set(other.keywords)):
            continue  # different keywords of one call: made one after the other
        first, last = change.lines
        if first <= other.lines[1] and other.lines[0] <= last:
            return other
    return None


def applied(source: Source, changes: list[Change]) -> str:
    """The file's text with ``changes`` made (the source's own tree is left as parsed)."""
    import libcst

    by_node: dict[int, list[Change]] = {}
    for change in changes:
        if change.node is not None:
            by_node.setdefault(id(change.node), []).append(change)
    insert: list[str] = []
    for change in changes:
        insert += [code for code in change.insert if code not in insert]

    class Transformer(libcst.CSTTransformer):
        def on_leave(self, original_node: Any, updated_node: Any) -> Any:
            for change in by_node.get(id(original_node), ()):
                updated_node = change.replace(updated_node)
            return updated_node

    module = source.module.visit(Transformer())
    text = module.code
    present = {line.strip() for line in source.text.splitlines()}
    fresh = [code for code in insert if code.strip() not in present]
    fresh.sort(key=lambda code: not code.startswith(("import ", "from ")))  # imports before the lines using them
    if fresh:
        module = libcst.parse_module(text)
        at = after_imports_index(module)
        body = list(module.body)
        body[at:at] = [libcst.parse_statement(code + "\n") for code in fresh]
        text = module.with_changes(body=body).code
    return text
