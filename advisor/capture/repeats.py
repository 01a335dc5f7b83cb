"""Repeated blocks traced once: a 32-layer decoder's graph from a capture of two of its layers.

Dynamo's capture grows with the model (a 32-layer GPT: 3.6 s, all of it symbolic conversion of the same block 32
times), the audit's one stage that runs no step. A run of identical blocks in a ``ModuleList`` or ``Sequential``
(same types, hyperparameters, parameter shapes and buffers, no hooks of their own) traces to the same nodes in
each block, given the same input. So the capture traces a copy with the first two blocks of each run and writes
the rest as copies of the second, renamed to their own modules; the result is the graph the whole capture gives,
node for node (tests/test_repeats.py compares them).

Only where the capture shows that this holds: one graph and no break; the two kept blocks traced to the same nodes
with the same shapes (so what the second hands on has the shape the first handed it); the second reads nothing of
the first but what a block hands the next; and nothing after the run reads the first block. Otherwise the caller
captures the whole model.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

import torch

from advisor.evidence import GraphNode

MIN_RUN = 3  # two blocks are traced; a run of two saves nothing
# Module state that is torch's machinery, not the block's configuration. training is compared; forward hooks
# make a block different from its neighbours (checked apart).
_MACHINERY = frozenset({
    "_parameters", "_buffers", "_modules", "_non_persistent_buffers_set", "_state_dict_hooks",
    "_state_dict_pre_hooks", "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks", "_is_full_backward_hook",
    "_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs", "_backward_hooks", "_backward_pre_hooks", "_compiled_call_impl",
    "call_super_init",
})
_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_PLAIN = (int, float, str, bool, bytes, type(None), torch.dtype, torch.device, torch.Size)


@dataclass(frozen=True)
class Run:
    """Children ``first``..``last`` of the container at ``path`` are the same block; the capture keeps
    ``first`` and ``first + 1``."""

    path: str
    keys: tuple[str, ...]  # the container's child names, in order
    first: int
    last: int

    def block_path(self, index: int) -> str:
        return f"{self.path}.{self.keys[index]}" if self.path else self.keys[index]

    @property
    def dropped(self) -> tuple[str, ...]:
        return self.keys[self.first + 2:self.last + 1]


def find_runs(model: torch.nn.Module) -> list[Run]:
    """The outermost runs of at least MIN_RUN identical consecutive children of a ModuleList or Sequential."""
    runs: list[Run] = []
    covered: list[str] = []  # blocks of the runs found: nothing inside them is looked at
    for path, module in model.named_modules():
        if any(path == block or path.startswith(block + ".") for block in covered):
            continue
        if not isinstance(module, (torch.nn.ModuleList, torch.nn.Sequential)) or len(module) < MIN_RUN:
            continue
        keys = tuple(module._modules)
        children = list(module._modules.values())
        signatures = [_signature(child) if child is not None else None for child in children]
        start = 0
        while start < len(children):
            end = start
            while end + 1 < len(children) and _same(signatures[start], signatures[end + 1]):
                end += 1
            if signatures[start] is not None and end - start + 1 >= MIN_RUN:
                run = Run(path, keys, start, end)
                runs.append(run)
                covered.extend(run.block_path(index) for index in range(start, end + 1))
            start = end + 1
    return [run for run in runs if _parameters_own(model, run)]


@contextmanager
def truncated(model: torch.nn.Module, runs: list[Run]) -> Iterator[None]:
    """``model`` with each run's blocks after its second taken out of their container, put back on exit."""
    removed: list[tuple[torch.nn.Module, dict[str, Any]]] = []
    try:
        for run in runs:
            container = model.get_submodule(run.path)
            removed.append((container, dict(container._modules)))
            for key in run.dropped:
                del container._modules[key]
        yield
    finally:
        for container, modules in removed:
            container._modules.clear()
            container._modules.update(modules)


def expand(nodes: list[GraphNode], runs: list[Run]) -> list[GraphNode] | None:
    """The nodes of the whole model from those of its truncated copy; None where the copy does not show that
    each dropped block traces as the second of its run did (the module docstring)."""
    for run in runs:
        expanded = _expand_run(nodes, run)
        if expanded is None:
            return None
        nodes = expanded
    return nodes


def _expand_run(nodes: list[GraphNode], run: Run) -> list[GraphNode] | None:
    first, second = run.block_path(run.first), run.block_path(run.first + 1)
    block_a = [n for n in nodes if _within(n.module_path, first)]
    block_b = [n for n in nodes if _within(n.module_path, second)]
    if not block_b or len(block_a) != len(block_b) or not _consecutive(nodes, block_a + block_b):
        return None
    index_a = {n.id: i for i, n in enumerate(block_a)}
    index_b = {n.id: i for i, n in enumerate(block_b)}
    for node_a, node_b in zip(block_a, block_b):
        # the same nodes with the same shapes: what the second hands on has the shape the first handed it
        if _shape_of(node_a, first) != _shape_of(node_b, second) or len(node_a.args) != len(node_b.args):
            return None
        for arg_a, arg_b in zip(node_a.args, node_b.args):
            if arg_b in index_b:  # inside the block: the same wiring in both
                if index_a.get(arg_a) != index_b[arg_b]:
                    return None
            elif arg_b in index_a:  # what the first block hands the second: the first read it from before the run
                if arg_a in index_a:
                    return None
            elif arg_a != arg_b:  # read from outside the run: the same value in both
                return None
    if any(arg in index_a for n in nodes if n.id not in index_a and n.id not in index_b for arg in n.args):
        return None  # something outside the run reads the first block (a list of every block's output)
    copies = _copies(block_b, index_a, index_b, run, second)
    last = {node.id: copies[-1][i].id for i, node in enumerate(block_b)}
    result: list[GraphNode] = []
    position = 0
    while position < len(nodes):
        node = nodes[position]
        if node.id not in index_b:
            result.append(node if not any(a in last for a in node.args)
                          else node.model_copy(update={"args": [last.get(a, a) for a in node.args]}))
            position += 1
            continue
        segment = position  # a stretch of the second block's nodes; each copy's stretch follows it
        while position < len(nodes) and nodes[position].id in index_b:
            position += 1
        result.extend(nodes[segment:position])
        for copy in copies:
            result.extend(copy[index_b[n.id]] for n in nodes[segment:position])
    return result


def _copies(block: list[GraphNode], index_a: dict[str, int], index_b: dict[str, int], run: Run,
            source: str) -> list[list[GraphNode]]:
    """The second block's nodes as each dropped block of the run: its module paths, ids and lifted names; what
    the second block read from the first, read from the block before."""
    copies: list[list[GraphNode]] = []
    previous = [node.id for node in block]
    old_name = _lifted_name(source)
    for key in run.dropped:
        target = run.block_path(run.keys.index(key))
        new_name = _lifted_name(target)
        ids = [f"{node.id}__{_safe(target)}" for node in block]
        copy = []
        for node, new_id in zip(block, ids):
            args = [ids[index_b[a]] if a in index_b else previous[index_a[a]] if a in index_a else a for a in node.args]
            lifted = node.op in ("placeholder", "get_attr")
            copy.append(node.model_copy(update={
                "id": new_id, "args": args, "module_path": target + node.module_path[len(source):],
                "target": node.target.replace(old_name, new_name) if lifted else node.target,
            }))
        copies.append(copy)
        previous = ids
    return copies


def _consecutive(nodes: list[GraphNode], blocks: list[GraphNode]) -> bool:
    """The two blocks' computing nodes sit together, the first's before the second's: nothing runs between the
    blocks that each dropped block would run again."""
    members = {n.id for n in blocks if n.op not in ("placeholder", "get_attr")}
    positions = [i for i, n in enumerate(nodes) if n.id in members]
    return bool(positions) and positions[-1] - positions[0] + 1 == len(positions)


def _within(path: str, block: str) -> bool:
    return path == block or path.startswith(block + ".")


def _shape_of(node: GraphNode, block: str) -> tuple:
    """All a node is, but for its id and where its block sits."""
    return (node.op, node.target if node.op not in ("placeholder", "get_attr") else "", node.shape, node.stride,
            node.dtype, node.contiguous, node.channels_last, node.device, tuple(node.constants),
            node.module_path[len(block):], node.module_type, node.file, node.line, node.code, node.value_kind)


def _lifted_name(block: str) -> str:
    """How Dynamo spells a block's path inside a lifted parameter's name (h.1 -> _modules_h_modules_1_)."""
    return "".join(f"_modules_{part}" for part in block.split(".")) + "_"


def _safe(path: str) -> str:
    return path.replace(".", "_")


def _signature(block: torch.nn.Module) -> tuple | None:
    """What decides how a block traces, comparable between blocks; None where something cannot be compared."""
    parts: list[Any] = []
    for name, module in block.named_modules(remove_duplicate=False):
        if any(getattr(module, hooks, None) for hooks in _HOOKS):
            return None
        state = []
        for key, value in sorted(vars(module).items()):
            if key in _MACHINERY:
                continue
            if (comparable := _comparable(value)) is _UNCOMPARABLE:
                return None
            state.append((key, comparable))
        tensors = [(key, _TensorKey(value)) for key, value in list(module._parameters.items()) +
                   list(module._buffers.items())]
        parts.append((name, type(module), tuple(state), tuple(tensors)))
    return tuple(parts)


_UNCOMPARABLE = object()


def _comparable(value: Any) -> Any:
    if isinstance(value, _PLAIN):
        return (type(value), value)
    if isinstance(value, (tuple, list, frozenset)):
        items = [_comparable(v) for v in value]
        return _UNCOMPARABLE if any(i is _UNCOMPARABLE for i in items) else (type(value), tuple(items))
    if isinstance(value, torch.Tensor):
        return _TensorKey(value)
    # functions, classes, a config object the blocks share: the same object; two equal copies are not trusted
    return ("object", id(value))


class _TensorKey:
    """A tensor compared by what a trace sees (shape, stride, dtype, device, grad) and, for a buffer-sized one,
    its values (a causal mask, a table of positions)."""

    def __init__(self, value: torch.Tensor | None):
        self.value = value
        self.meta = None if value is None else (tuple(value.shape), value.stride(), value.dtype, value.device,
                                                value.requires_grad, type(value))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _TensorKey) or self.meta != other.meta:
            return False
        if self.value is None or isinstance(self.value, torch.nn.Parameter):
            return True  # weights differ by value in every block and no trace reads them
        with torch.no_grad():
            return bool(torch.equal(self.value, other.value))

    __hash__ = None  # type: ignore[assignment]


def _same(left: tuple | None, right: tuple | None) -> bool:
    return left is not None and right is not None and left == right


def _parameters_own(model: torch.nn.Module, run: Run) -> bool:
    """No parameter or buffer of the run's blocks is also held elsewhere (tied weights would be lifted once)."""
    owners: dict[int, int] = {}
    for _, tensor in _tensors(model):
        owners[id(tensor)] = owners.get(id(tensor), 0) + 1
    container = model.get_submodule(run.path)
    blocks = [container._modules[key] for key in run.keys[run.first:run.last + 1]]
    return not any(owners[id(tensor)] > 1 for block in blocks for _, tensor in _tensors(block))


def _tensors(module: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """Every parameter and buffer, each time a module holds it (a tied weight twice)."""
    return list(module.named_parameters(remove_duplicate=False)) + list(module.named_buffers(remove_duplicate=False))
