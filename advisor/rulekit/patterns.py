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
    SCORE_VIEWS,
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
    between: list[N] = field(default_factory=list)  # scale, mask, cast and view nodes, from scores to softmax
    after: list[N] = field(default_factory=list)  # cast, dropout and view nodes between softmax and output


def einsum_role(equation: str) -> str | None:
    """'scores' for q·kᵀ over the head dimension, in any layout whose result ends with (q, k)
    ("bhqd,bhkd->bhqk", "bqhd,bkhd->bhqk"); 'output' for weights·v over the keys, the weights' last
    dimension ("bhqk,bhkd->bhqd", "bhqk,bkhd->bqhd"); None for any other contraction."""
    parts = _einsum_parts(equation)
    if parts is None:
        return None
    a, b, result, contracted, only_a, only_b = parts
    if a[-1] == contracted == b[-1] and result[-2:] == only_a + only_b:
        return "scores"
    if a[-1] == contracted != b[-1] and b[-1] == only_b and result[-1] == only_b and a[-2] == only_a:
        return "output"
    return None


def einsum_permutations(scores: str, output: str) -> dict[str, tuple[int, ...]] | None:
    """How to lay q, k, v out as SDPA takes them ([batch..., seq, dim], the batch dimensions in the
    order of the scores' result) and SDPA's result out as the output einsum's result; None when the
    equations do not pair up."""
    first, second = _einsum_parts(scores), _einsum_parts(output)
    if first is None or second is None:
        return None
    q_in, k_in, scores_out, head, query_seq, key_seq = first
    weights, v_in, out, keys, out_seq, value_dim = second
    if len(weights) != len(scores_out):
        return None
    batch = scores_out[:-2]
    rename = dict(zip(weights, scores_out))  # the output einsum's letters for the same dimensions
    back = {letter: mine for mine, letter in rename.items()}
    sdpa_out = [back[letter] for letter in batch] + [out_seq, value_dim]
    try:
        return {
            "query": tuple(q_in.index(letter) for letter in [*batch, query_seq, head]),
            "key": tuple(k_in.index(letter) for letter in [*batch, key_seq, head]),
            "value": tuple(v_in.index(letter) for letter in [*(back[x] for x in batch), keys, value_dim]),
            "output": tuple(sdpa_out.index(letter) for letter in out),
        }
    except (ValueError, KeyError):
        return None


def _einsum_parts(equation: str) -> tuple[str, str, str, str, str, str] | None:
    """(a, b, result, the contracted letter, a's own letter, b's own letter) of a two-operand einsum that
    contracts one dimension and keeps one of each operand's own, every other dimension shared by all three."""
    compact = equation.replace(" ", "")
    if compact.count(",") != 1 or compact.count("->") != 1 or "." in compact:
        return None
    operands, result = compact.split("->")
    a, b = operands.split(",")
    if any(len(set(x)) != len(x) or len(x) < 2 for x in (a, b, result)):
        return None
    contracted = (set(a) & set(b)) - set(result)
    only_a, only_b = set(a) - set(b), set(b) - set(a)
    batch = set(a) & set(b) & set(result)
    if len(contracted) != 1 or len(only_a) != 1 or len(only_b) != 1 or set(result) != batch | only_a | only_b:
        return None
    return a, b, result, contracted.pop(), only_a.pop(), only_b.pop()


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

    def _users(node: N) -> list[N]:
        """Its users, less a ``type_as`` that reads it for its dtype only (``softmax(x.float()).type_as(x)``)."""
        return [user for user in users(node)
                if not (name(user) == "type_as" and len(inputs(user)) > 1 and inputs(user)[1] is node)]

    found = []
    for softmax in nodes:
        if name(softmax) not in SOFTMAX or not inputs(softmax):
            continue
        between, node = [], inputs(softmax)[0]
        while name(node) in SCALES | MASKS | CASTS | SCORE_VIEWS and inputs(node) and len(_users(node)) == 1:
            between.append(node)
            node = _score_input(node, name, inputs)
            if node is None:
                break
        if node is None or role(node) not in ("matmul", "scores") or len(_users(node)) != 1:
            continue
        after, weights = [], softmax
        while len(_users(weights)) == 1 and name(_users(weights)[0]) in CASTS | DROPOUT | SCORE_VIEWS:
            weights = _users(weights)[0]
            after.append(weights)
        consumers = _users(weights)
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
