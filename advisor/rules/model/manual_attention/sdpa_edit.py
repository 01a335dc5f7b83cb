"""The hand-written attention block read back from the source and written as one
``torch.nn.functional.scaled_dot_product_attention`` call: manual-attention's codemod.

Only the plain chain is rewritten, each statement an assignment read by the next, in one block:

    s = (q @ k.transpose(-2, -1)) * scale      # or / scale, or torch.matmul(q, k.transpose(-2, -1)), or none
    s = s.masked_fill(mask, float("-inf"))     # optional: the mask names what is hidden
    a = F.softmax(s, dim=-1)                   # or s.softmax(dim=-1), torch.softmax(s, -1)
    a = self.dropout(a)                        # optional: an nn.Dropout module
    y = a @ v                                  # or torch.matmul(a, v)

becomes ``y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=~(mask), dropout_p=...,
scale=...)``. The scale is always passed (the user's may not be 1/sqrt(head_dim)). Anything else
(a mask added to the scores, a transpose folded elsewhere, a value used twice) raises NoEdit.
"""

from __future__ import annotations

from typing import Any

from advisor.patch.codemods import Change, NoEdit, Source


def sdpa_changes(source: Source, first_line: int, last_line: int) -> list[Change]:
    """The block's first statement replaced by the call, the others removed; unsafe where the block has
    dropout (in training SDPA draws other random numbers than the user's dropout module)."""
    import libcst

    statements = _statements(source, first_line, last_line)
    chain = [_assignment(source, statement) for statement in statements]
    target, value = chain[0]
    q, k, scale = _scores(source, value)
    mask = None
    steps = chain[1:]
    if steps and _method(steps[0][1], "masked_fill"):
        mask_call = steps[0][1]
        _reads(source, mask_call.func.value, target)
        if not _is_minus_infinity(source, mask_call.args[1].value):
            raise NoEdit("the scores are masked with a finite value; SDPA's boolean mask hides with -inf")
        mask = source.module.code_for_node(mask_call.args[0].value)
        target, steps = steps[0][0], steps[1:]
    if not steps or not _is_softmax(source, steps[0][1], target):
        raise NoEdit(f"no softmax over the scores right after them at {source.path}:{first_line}")
    target, steps = steps[0][0], steps[1:]
    dropout = None
    if steps and isinstance(steps[0][1], libcst.Call) and len(steps[0][1].args) == 1 \
            and source.module.code_for_node(steps[0][1].args[0].value) == target and "dropout" in \
            source.module.code_for_node(steps[0][1].func).lower():
        dropout = source.module.code_for_node(steps[0][1].func)
        target, steps = steps[0][0], steps[1:]
    if len(steps) != 1:
        raise NoEdit(f"the block at {source.path}:{first_line}-{last_line} is not one attention chain")
    output, product = steps[0]
    v = _product_with(source, product, target)
    arguments = [q, k, v]
    if mask is not None:
        arguments.append(f"attn_mask=~({mask})")
    if dropout is not None:
        arguments.append(f"dropout_p={dropout}.p if self.training else 0.0")
    arguments.append(f"scale={scale}")
    call = f"{output} = torch.nn.functional.scaled_dot_product_attention({', '.join(arguments)})"
    unsafe = "in training, SDPA's dropout draws other random numbers" if dropout is not None else ""
    first = Change(path=source.path, node=statements[0], lines=source.span(statements[0]),
                   replace=lambda node: libcst.parse_statement(call + "\n").with_changes(leading_lines=node.leading_lines),
                   what="one scaled_dot_product_attention call", unsafe=unsafe)
    return [first] + [Change(path=source.path, node=statement, lines=source.span(statement), unsafe=unsafe,
                             replace=lambda node: libcst.RemoveFromParent(), what="folded into the SDPA call")
                      for statement in statements[1:]]


def _statements(source: Source, first_line: int, last_line: int) -> list[Any]:
    import libcst

    found = [node for node in source.positions if isinstance(node, libcst.SimpleStatementLine)
             and first_line <= source.span(node)[0] <= last_line]
    if not found:
        raise NoEdit(f"no statements at {source.path}:{first_line}-{last_line}")
    block = source.parents.get(found[0])
    if any(source.parents.get(node) is not block for node in found) or not hasattr(block, "body"):
        raise NoEdit(f"the attention at {source.path}:{first_line}-{last_line} spans more than one block")
    body = list(block.body)
    indices = sorted(body.index(node) for node in found)
    if indices != list(range(indices[0], indices[-1] + 1)):
        raise NoEdit(f"the attention at {source.path}:{first_line}-{last_line} is interleaved with other code")
    return [body[i] for i in indices]


def _assignment(source: Source, statement: Any) -> tuple[str, Any]:
    import libcst

    if len(statement.body) != 1 or not isinstance(statement.body[0], libcst.Assign) \
            or len(statement.body[0].targets) != 1 or not isinstance(statement.body[0].targets[0].target, libcst.Name):
        raise NoEdit(f"{source.path}:{source.span(statement)[0]} is not a plain assignment")
    return statement.body[0].targets[0].target.value, statement.body[0].value


def _unparen(node: Any) -> Any:
    return node.with_changes(lpar=[], rpar=[]) if getattr(node, "lpar", None) else node


def _scores(source: Source, value: Any) -> tuple[str, str, str]:
    """(q, k, scale) of ``q @ k.transpose(-2, -1)`` times or over a scale."""
    import libcst

    code = source.module.code_for_node
    scale = "1.0"
    value = _unparen(value)
    if isinstance(value, libcst.BinaryOperation) and isinstance(value.operator, (libcst.Multiply, libcst.Divide)):
        product, factor = _unparen(value.left), _unparen(value.right)
        simple = isinstance(factor, (libcst.Name, libcst.Attribute, libcst.Call, libcst.Integer, libcst.Float))
        scale = code(factor) if isinstance(value.operator, libcst.Multiply) else (
            f"1.0 / {code(factor)}" if simple else f"1.0 / ({code(factor)})")
        value = product
    pair = _matmul(value)
    if pair is None:
        raise NoEdit("the scores are not q @ k.transpose(-2, -1)")
    q, kt = pair
    kt = _unparen(kt)
    if not (_method(kt, "transpose") and [code(a.value) for a in kt.args] in (["-2", "-1"], ["-1", "-2"])):
        raise NoEdit("the scores' key is not transposed over its last two dimensions")
    return code(q), code(kt.func.value), scale


def _matmul(value: Any) -> tuple[Any, Any] | None:
    import libcst

    value = _unparen(value)
    if isinstance(value, libcst.BinaryOperation) and isinstance(value.operator, libcst.MatrixMultiply):
        return value.left, value.right
    if isinstance(value, libcst.Call) and isinstance(value.func, libcst.Attribute) \
            and value.func.attr.value == "matmul" and len(value.args) == 2:
        return value.args[0].value, value.args[1].value
    return None


def _product_with(source: Source, value: Any, weights: str) -> str:
    pair = _matmul(value)
    if pair is None or source.module.code_for_node(pair[0]) != weights:
        raise NoEdit("the attention's output is not its weights @ v")
    return source.module.code_for_node(pair[1])


def _method(node: Any, name: str) -> bool:
    import libcst

    return isinstance(node, libcst.Call) and isinstance(node.func, libcst.Attribute) and node.func.attr.value == name


def _reads(source: Source, node: Any, name: str) -> None:
    if source.module.code_for_node(node) != name:
        raise NoEdit(f"the masked scores are not {name}")


def _is_minus_infinity(source: Source, node: Any) -> bool:
    text = source.module.code_for_node(node).replace(" ", "")
    return text in ('float("-inf")', "float('-inf')", "-float('inf')", '-float("inf")', "-torch.inf", "-math.inf")


def _is_softmax(source: Source, node: Any, scores: str) -> bool:
    import libcst

    if not isinstance(node, libcst.Call):
        return False
    code = source.module.code_for_node
    last = [a for a in node.args if a.keyword is None or a.keyword.value == "dim"]
    if _method(node, "softmax") and code(node.func.value) == scores:
        return bool(node.args) and code(node.args[0].value) == "-1"
    name = code(node.func)
    return (name.endswith("softmax") and len(last) == 2 and code(last[0].value) == scores
            and code(last[1].value) == "-1")
