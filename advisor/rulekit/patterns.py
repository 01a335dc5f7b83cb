"""Graph patterns shared by the rules (over captured GraphNodes) and the rewrites (over torch.fx nodes).

A pattern reads a graph through three functions — a node's op name, its inputs in argument
order, its users — so the same matcher serves the evidence and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Generic, Iterable, TypeVar

from advisor.opnames import (
    ADDITIVE_MASKS,
    BADDBMM,
    CASTS,
    CONSTANT_FACTORIES,
    DIVIDE_SCALES,
    DROPOUT,
    EINSUM,
    FILL_MASKS,
    MULTIPLY_SCALES,
    SCORE_MATMULS,
    SOFTMAX,
    WHERE_MASKS,
)

N = TypeVar("N")

SCALES = MULTIPLY_SCALES | DIVIDE_SCALES
MASKS = FILL_MASKS | WHERE_MASKS | ADDITIVE_MASKS


@dataclass
class Attention(Generic[N]):
    """``softmax(mask(scale(q @ kᵀ))) @ v`` written out by hand."""

    scores: N  # q @ k.transpose(-2, -1), baddbmm(bias, q, kᵀ) or einsum("...qd,...kd->...qk", q, k)
    softmax: N
    output: N  # weights @ v, or einsum("...qk,...kd->...qd", weights, v)
    between: list[N] = field(default_factory=list)  # scale, mask and cast nodes, from scores to softmax
    after: list[N] = field(default_factory=list)  # cast and dropout nodes between softmax and output


def einsum_role(equation: str) -> str | None:
    """'scores' for q·kᵀ over the last dimension ("bhqd,bhkd->bhqk"), 'output' for weights·v
    ("bhqk,bhkd->bhqd"); None for any other contraction."""
    compact = equation.replace(" ", "")
    if compact.count(",") != 1 or "->" not in compact or "." in compact:
        return None
    operands, result = compact.split("->")
    a, b = operands.split(",")
    if not (len(a) == len(b) == len(result) >= 2) or a[:-2] != b[:-2] or a[:-2] != result[:-2]:
        return None
    (x, y), (z, w), (r1, r2) = a[-2:], b[-2:], result[-2:]
    if y == w and (r1, r2) == (x, z) and len({x, y, z}) == 3:
        return "scores"
    if y == z and (r1, r2) == (x, w) and len({x, y, w}) == 3:
        return "output"
    return None


def find_attention(nodes: Iterable[N], name: Callable[[N], str], inputs: Callable[[N], list[N]],
                   users: Callable[[N], list[N]], equation: Callable[[N], str] = lambda n: "") -> list[Attention[N]]:
    """Hand-written attention blocks; ``equation`` gives an einsum node's equation."""
    def role(node: N) -> str | None:
        op = name(node)
        if op in SCORE_MATMULS:
            return "matmul"
        if op in BADDBMM:
            return "scores"
        if op in EINSUM:
            return einsum_role(equation(node) or "")
        return None

    found = []
    for softmax in nodes:
        if name(softmax) not in SOFTMAX or not inputs(softmax):
            continue
        between, node = [], inputs(softmax)[0]
        while name(node) in SCALES | MASKS | CASTS and inputs(node) and len(users(node)) == 1:
            between.append(node)
            node = _score_input(node, name, inputs)
            if node is None:
                break
        if node is None or role(node) not in ("matmul", "scores") or len(users(node)) != 1:
            continue
        after, weights = [], softmax
        while len(users(weights)) == 1 and name(users(weights)[0]) in CASTS | DROPOUT:
            weights = users(weights)[0]
            after.append(weights)
        consumers = users(weights)
        if len(consumers) != 1 or role(consumers[0]) not in ("matmul", "output") \
                or inputs(consumers[0])[0] is not weights:
            continue  # the weights are also used elsewhere (returned, logged): not replaceable
        found.append(Attention(scores=node, softmax=softmax, output=consumers[0], between=between[::-1],
                               after=after))
    return found


def mask_operands(node: N, name: Callable[[N], str], inputs: Callable[[N], list[N]]) -> list[N]:
    """The inputs of a mask node other than the scores it masks (the mask, a fill value)."""
    scores = _score_input(node, name, inputs)
    return [i for i in inputs(node) if i is not scores]


def _score_input(node: N, name: Callable[[N], str], inputs: Callable[[N], list[N]]) -> N | None:
    """The operand of a scale/mask/cast node that carries the scores (the mask is the other one)."""
    args = inputs(node)
    if name(node) in WHERE_MASKS:
        return args[1] if len(args) > 1 else None  # where(mask, scores, fill)
    return args[0]


# Never constant even with constant inputs: randomness and uninitialized memory.
NOT_CONSTANT = ("rand", "normal", "bernoulli", "dropout", "multinomial", "empty", "uniform", "poisson")


def find_constants(calls: Iterable[N], name: Callable[[N], str], is_function: Callable[[N], bool],
                   inputs: Callable[[N], list], key: Callable[[N], object]) -> list[N]:
    """Calls (in graph order) whose value is the same every step: a factory of constants, or
    pure ops on such values only. ``inputs`` gives the keys of a call's inputs."""
    known: set = set()
    found = []
    for node in calls:
        if _constant_call(name(node).rsplit(".", 1)[-1], is_function(node), inputs(node), known):
            known.add(key(node))
            found.append(node)
    return found


def _constant_call(name: str, is_function: bool, inputs: list, known: set) -> bool:
    if any(word in name for word in NOT_CONSTANT) or (name.endswith("_") and not name.endswith("__")):
        return False  # random, uninitialized, or in place
    if not inputs:
        return is_function and name in CONSTANT_FACTORIES
    return all(i in known for i in inputs)
