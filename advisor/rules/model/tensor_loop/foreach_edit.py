"""A loop over tensors read back from the source and written as ``torch._foreach_*`` calls: tensor-loop's codemod.

Only a loop whose body is one update of one tensor per iteration is rewritten, where the tensor updated and
the one it takes from are the loop's own (``k`` or ``k.data``) and every factor is the same for all iterations:

    for q, k in zip(encoder_q.parameters(), encoder_k.parameters()):
        k.data = k.data * m + q.data * (1 - m)    # or k.data.copy_(...), terms and factors in any order
        k.data.mul_(m).add_(q.data, alpha=1 - m)  # or .add_(q.data), k.add_(q, alpha=a), k.mul_(m)
        k.lerp_(q, 1 - m)                         # or weight=...
        k.data -= lr * q.grad                     # or +=, a factor on either side, or none

becomes the pairs gathered once (the loop's iterable read once, as the loop read it) and each operation over
all of them in one call:

    pairs = [(k.data, q.data) for q, k in zip(encoder_q.parameters(), encoder_k.parameters())]
    targets = [target for target, _ in pairs]
    torch._foreach_mul_(targets, m)
    torch._foreach_add_(targets, [source for _, source in pairs], alpha=1 - m)

The same arithmetic in the same order, each tensor updated in place where the loop replaced it: results equal
to rounding. Anything else (a body of several statements, a factor that differs per tensor, the loop's names
read after it, the new names taken in the function) raises NoEdit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from advisor.patch.codemods import Change, NoEdit, Source

NEW_NAMES = ("pairs", "targets", "target", "source")


@dataclass
class Update:
    """One iteration's update: ``target`` scaled by ``scale``, then ``source`` times ``alpha`` added (or
    ``target`` moved toward ``source`` by ``weight``)."""

    target: str
    source: str = ""
    scale: str = ""
    alpha: str = ""
    weight: str = ""


def foreach_changes(source: Source, loop_line: int) -> list[Change]:
    """The ``for`` loop at ``loop_line`` replaced by the foreach form of its one update."""
    import libcst

    loop = _loop(source, loop_line)
    names = _bound(loop.target)
    body = loop.body.body
    if len(body) != 1 or not isinstance(body[0], libcst.SimpleStatementLine) or len(body[0].body) != 1:
        raise NoEdit(f"the loop at {source.path}:{loop_line} does more than one update per tensor")
    update = _update(source, body[0].body[0], names)
    _names_free(source, loop, names)
    code = source.module.code_for_node
    pairs = (f"pairs = [({update.target}, {update.source}) for {code(loop.target)} in {code(loop.iter)}]"
             if update.source else f"pairs = [({update.target}, None) for {code(loop.target)} in {code(loop.iter)}]")
    lines = [pairs, "targets = [target for target, _ in pairs]"]
    sources = "[source for _, source in pairs]"
    if update.weight:
        lines.append(f"torch._foreach_lerp_(targets, {sources}, {update.weight})")
    if update.scale:
        lines.append(f"torch._foreach_mul_(targets, {update.scale})")
    if update.source and not update.weight:
        alpha = f", alpha={update.alpha}" if update.alpha else ""
        lines.append(f"torch._foreach_add_(targets, {sources}{alpha})")
    statements = [libcst.parse_statement(line + "\n") for line in lines]
    statements[0] = statements[0].with_changes(leading_lines=loop.leading_lines)

    def rewrite(node: Any) -> Any:
        return libcst.FlattenSentinel(statements)
    what = "the loop's update over all tensors at once: " + "; ".join(line.split("(")[0] for line in lines[2:])
    return source.with_torch([Change(path=source.path, node=loop, replace=rewrite, lines=source.span(loop),
                                     what=what)])


def _loop(source: Source, line: int) -> Any:
    import libcst

    found = [node for node in source.positions if isinstance(node, libcst.For) and source.span(node)[0] == line]
    if len(found) != 1:
        raise NoEdit(f"no single for statement starts at {source.path}:{line} (a comprehension is rewritten by hand)")
    loop = found[0]
    if loop.orelse is not None or loop.asynchronous is not None:
        raise NoEdit(f"the loop at {source.path}:{line} has an else branch or is asynchronous")
    return loop


def _bound(target: Any) -> set[str]:
    """The loop's names (``q, k`` in ``for q, k in ...``); nothing else is rewritten."""
    import libcst

    if isinstance(target, libcst.Name):
        return {target.value}
    if isinstance(target, (libcst.Tuple, libcst.List)) and all(isinstance(e.value, libcst.Name) for e in target.elements):
        return {e.value.value for e in target.elements}
    raise NoEdit("the loop unpacks into more than plain names")


def _update(source: Source, statement: Any, names: set[str]) -> Update:
    import libcst

    code = source.module.code_for_node
    if isinstance(statement, libcst.Assign) and len(statement.targets) == 1:
        target = statement.targets[0].target
        if not (isinstance(target, libcst.Attribute) and target.attr.value == "data"):
            raise NoEdit("the loop assigns to a name, not to a tensor's .data: nothing outside the loop changes")
        return _linear(source, code(target), statement.value, names)
    if isinstance(statement, libcst.AugAssign):
        target = _tensor(source, statement.target, names)
        if not isinstance(statement.operator, (libcst.AddAssign, libcst.SubtractAssign)):
            raise NoEdit("the loop's update is not an addition or a subtraction in place")
        term, factor = _product(source, statement.value, names)
        negative = isinstance(statement.operator, libcst.SubtractAssign)
        alpha = _negated(factor) if negative else factor
        return Update(target=target, source=term, alpha=alpha)
    if isinstance(statement, libcst.Expr) and isinstance(statement.value, libcst.Call):
        return _in_place(source, statement.value, names)
    raise NoEdit("the loop's body is not an update of one tensor")


def _in_place(source: Source, call: Any, names: set[str]) -> Update:
    """``t.copy_(expr)``, ``t.lerp_(s, w)``, ``t.mul_(a)``, ``t.add_(s, alpha=b)`` or ``t.mul_(a).add_(s, ...)``."""
    import libcst

    code = source.module.code_for_node
    method = call.func.attr.value if isinstance(call.func, libcst.Attribute) else ""
    owner = call.func.value if method else None
    arguments = {arg.keyword.value if arg.keyword else index: arg.value for index, arg in enumerate(call.args)}
    if method == "copy_" and set(arguments) == {0}:
        return _linear(source, _tensor(source, owner, names), arguments[0], names)
    if method == "lerp_" and len(arguments) == 2:
        weight = arguments.get(1, arguments.get("weight"))
        if weight is None or _mentions(weight, names):
            raise NoEdit("the interpolation's weight is not one value for all tensors")
        return Update(target=_tensor(source, owner, names), source=_tensor(source, arguments[0], names),
                      weight=code(weight))
    if method == "mul_" and set(arguments) == {0}:
        return Update(target=_tensor(source, owner, names), scale=_constant(source, arguments[0], names))
    if method == "add_" and 0 in arguments and set(arguments) <= {0, "alpha"}:
        scaled = isinstance(owner, libcst.Call) and isinstance(owner.func, libcst.Attribute) \
            and owner.func.attr.value == "mul_"
        update = _in_place(source, owner, names) if scaled else Update(target=_tensor(source, owner, names))
        if update.source or update.weight:
            raise NoEdit("the loop chains more than a scaling and one addition")
        alpha = _constant(source, arguments["alpha"], names) if "alpha" in arguments else ""
        return Update(target=update.target, scale=update.scale, source=_tensor(source, arguments[0], names),
                      alpha=alpha)
    raise NoEdit(f"the loop's call {code(call.func)}(...) has no foreach form advisor writes")


def _linear(source: Source, target: str, value: Any, names: set[str]) -> Update:
    """``target * a + s * b`` (the terms and each term's factors in either order)."""
    import libcst

    if not (isinstance(value, libcst.BinaryOperation) and isinstance(value.operator, libcst.Add)):
        raise NoEdit("the new value is not a sum of the tensor's own term and another")
    terms = [_product(source, side, names) for side in (value.left, value.right)]
    own = [index for index, (term, _) in enumerate(terms) if term == target]
    if len(own) != 1:
        raise NoEdit(f"the new value does not scale {target} once")
    (_, scale), (other, alpha) = terms[own[0]], terms[1 - own[0]]
    if other == target:
        raise NoEdit("both terms are the tensor's own")
    return Update(target=target, source=other, scale=scale, alpha=alpha)


def _product(source: Source, expression: Any, names: set[str]) -> tuple[str, str]:
    """(the tensor, its factor) of ``t``, ``t * a``, ``a * t`` or ``(...)``; the factor empty for a bare tensor."""
    import libcst

    code = source.module.code_for_node
    if isinstance(expression, libcst.BinaryOperation) and isinstance(expression.operator, libcst.Multiply):
        left, right = _mentions(expression.left, names), _mentions(expression.right, names)
        if left == right:
            raise NoEdit(f"{code(expression)} is not one tensor times one value for all tensors")
        tensor, factor = (expression.left, expression.right) if left else (expression.right, expression.left)
        return _tensor(source, tensor, names), _constant(source, factor, names)
    return _tensor(source, expression, names), ""


def _negated(factor: str) -> str:
    if not factor:
        return "-1"
    return f"-{factor}" if factor.replace(".", "").replace("_", "").isalnum() else f"-({factor})"


def _tensor(source: Source, expression: Any, names: set[str]) -> str:
    """One of the loop's tensors as written (``k``, ``k.data``, ``q.grad``, in parentheses or not)."""
    import libcst

    bare = expression.with_changes(lpar=[], rpar=[]) if getattr(expression, "lpar", None) else expression
    if isinstance(bare, libcst.Name) and bare.value in names:
        return bare.value
    if isinstance(bare, libcst.Attribute) and isinstance(bare.value, libcst.Name) and bare.value.value in names \
            and bare.attr.value in ("data", "grad"):
        return source.module.code_for_node(bare)
    raise NoEdit(f"{source.module.code_for_node(expression)} is not one of the loop's tensors")


def _constant(source: Source, expression: Any, names: set[str]) -> str:
    """A factor the same for every tensor, as written (its outer parentheses dropped: it becomes an argument)."""
    if _mentions(expression, names):
        raise NoEdit(f"{source.module.code_for_node(expression)} differs per tensor")
    bare = expression.with_changes(lpar=[], rpar=[]) if getattr(expression, "lpar", None) else expression
    return source.module.code_for_node(bare)


def _mentions(expression: Any, names: set[str]) -> bool:
    import libcst

    class Names(libcst.CSTVisitor):
        found = False

        def visit_Name(self, node: Any) -> None:
            self.found = self.found or node.value in names
    visitor = Names()
    expression.visit(visitor)
    return visitor.found


def _names_free(source: Source, loop: Any, names: set[str]) -> None:
    """The new names are not the function's own, and the loop's names are not read after it (the foreach form
    leaves them unbound)."""
    import libcst

    scope = source.parents.get(loop)
    while scope is not None and not isinstance(scope, (libcst.FunctionDef, libcst.Module)):
        scope = source.parents.get(scope)
    end = source.span(loop)[1]
    used: set[str] = set()
    later: set[str] = set()
    for node in source.positions:
        if isinstance(node, libcst.Name) and _inside(source, node, scope):
            used.add(node.value)
            if source.span(node)[0] > end:
                later.add(node.value)
    if taken := sorted(set(NEW_NAMES) & used):
        raise NoEdit(f"the function already uses the name(s) {', '.join(taken)} the foreach form would bind")
    if read := sorted(names & later):
        raise NoEdit(f"the loop's name(s) {', '.join(read)} are read after it")


def _inside(source: Source, node: Any, scope: Any) -> bool:
    while node is not None:
        if node is scope:
            return True
        node = source.parents.get(node)
    return False
