"""What the codemods read of libcst nodes: a dotted name, whether a callee ends in a name, an argument
list's commas after one is dropped, a docstring, and where a module's imports end. libcst is imported
inside each function: rule files load the codemods for offline trace analysis too."""

from __future__ import annotations

from typing import Any


def dotted(expression: Any) -> str:
    import libcst

    if isinstance(expression, libcst.Name):
        return expression.value
    if isinstance(expression, libcst.Attribute):
        return f"{dotted(expression.value)}.{expression.attr.value}"
    return ""


def ends_with_name(func: Any, name: str) -> bool:
    """``optim.AdamW`` ends in ``AdamW`` and in ``optim.AdamW``; ``MyAdamW`` does not end in ``AdamW``."""
    written = dotted(func)
    return written == name or written.endswith("." + name)


def commas_fixed(args: list, original: Any) -> list:
    """The arguments joined as the call joined its own: each but the last followed by the comma the
    call's arguments were separated with (a new line, in a call written one argument per line); the last
    ends as the call's last argument ended (with or without a trailing comma)."""
    import libcst

    original = list(original)
    trailing = original[-1].comma if original else libcst.MaybeSentinel.DEFAULT
    between = next((arg.comma for arg in original[:-1] if not has_comment(arg.comma)),
                   libcst.Comma(whitespace_after=libcst.SimpleWhitespace(" ")))
    fixed = []
    for index, arg in enumerate(args):
        if index < len(args) - 1:
            if isinstance(arg.comma, libcst.MaybeSentinel) or arg.comma is trailing:
                arg = arg.with_changes(comma=between)
        else:
            arg = arg.with_changes(comma=trailing)
        fixed.append(arg)
    return fixed


def is_docstring(statement: Any) -> bool:
    import libcst

    return (isinstance(statement, libcst.SimpleStatementLine) and len(statement.body) == 1
            and isinstance(statement.body[0], libcst.Expr) and isinstance(statement.body[0].value, libcst.SimpleString))


def has_comment(comma: Any) -> bool:
    import libcst

    after = getattr(comma, "whitespace_after", None)
    return isinstance(after, libcst.ParenthesizedWhitespace) and after.first_line.comment is not None


def after_imports_index(module: Any) -> int:
    """The index of the first statement after the leading docstring, __future__ and other imports."""
    import libcst

    at = 0
    for index, statement in enumerate(module.body):
        if isinstance(statement, libcst.SimpleStatementLine) and all(
                isinstance(part, (libcst.Import, libcst.ImportFrom))
                or (index == 0 and isinstance(part, libcst.Expr) and isinstance(part.value, libcst.SimpleString))
                for part in statement.body):
            at = index + 1
        else:
            break
    return at
