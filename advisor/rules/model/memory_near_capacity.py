"""The step's peak memory is close to what the device (or the process) can hold.

What it detects:
    The step's peak memory (what it starts with plus the most its allocations rise, by the CUDA caching allocator's
    or the CPU allocator's count) at or above ``min_share`` of the capacity: the GPU's memory, or on a CPU the
    memory the process holds and could still get (the host's available RAM, or the cgroup's memory limit where one
    binds). On CUDA what the caching allocator reserved over the step counts where it is more than the peak: a
    reserve with ``min_cached_free`` of it in free cached blocks is fragmentation, and said so. The kind that holds
    most of the peak decides the advice.

Why it matters:
    A step near its device's capacity fails with an out-of-memory error on the first longer sequence or larger
    batch, runs with no room for a larger batch (throughput left on the table), and on a GPU makes the caching
    allocator free and re-split blocks (``cudaFree`` stalls, fragmentation) every step.

How to fix:
    Activations: recompute them in the backward (``torch.utils.checkpoint`` around the repeated blocks) or halve
    them with bf16 autocast. Optimizer state: a lighter optimizer (Adafactor, 8-bit Adam), or shard it across
    ranks (ZeRO, FSDP). Parameters: keep them in bf16, or shard them (FSDP). Fragmentation:
    ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` before CUDA starts. The fix is verified for memory: a
    training step whose activations hold most of the peak gets its repeated blocks (the indexed children of one
    container, ``h.0`` ... ``h.11``, that run the same operators, and hold no BatchNorm, whose running statistics a
    recomputation would update twice) checkpointed; without such blocks, or where temporaries hold most, the step
    runs under bf16 autocast (fp16 on GPUs before Ampere). Each side's peak is measured, with what the fix costs
    the step's time.

Example:
    Before::

        for block in self.h:
            x = block(x)

    After::

        for block in self.h:
            x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
"""

from __future__ import annotations

from typing import Any, Iterator

from advisor.evidence import Evidence, GraphCapture, GraphNode
from advisor.rulekit.fixing import replace_target
from advisor.rulekit.helpers import is_ampere_or_newer
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Location, Margin, Severity, Threshold, Thresholds, rule

ADVICE = {
    "activations": "recompute activations in the backward (torch.utils.checkpoint around the repeated blocks) or "
                   "halve them with bf16 autocast",
    "temporaries": "free what the step keeps between operators (del large intermediates), or bf16 autocast",
    "optimizer state": "a lighter optimizer (Adafactor, 8-bit Adam) or its state sharded across ranks (ZeRO, FSDP)",
    "parameters": "parameters in bf16, or sharded across ranks (FSDP)",
    "gradients": "gradients in bf16, or sharded across ranks (FSDP, ZeRO-2)",
}
MIN_BLOCK_OPERATORS = 3  # a block of one or two operators saves what checkpointing would save anyway: its input
TOLERANCE = {"checkpoint": 1e-4, "autocast": 0.05}  # recomputation repeats the same operators; bf16 rounds them
DOCS = ["https://pytorch.org/docs/stable/checkpoint.html", "https://pytorch.org/blog/understanding-gpu-memory-1/"]
EXPANDABLE = ("set before CUDA starts: the allocator grows segments in place instead of leaving blocks too small to "
              "reuse; not measured here, where baseline and candidate share one process")


@rule(
    slug="memory-near-capacity",
    code="ADV148",
    layer=Layer.MODEL,
    needs=("memory",),
    severity=Severity.MEDIUM,
    thresholds={"min_share": Threshold(0.8, "the step's peak (or what the caching allocator reserved for it, where "
                                            "more) over the capacity"),
                "high_share": Threshold(0.9, "share at which the finding is high"),
                "min_cached_free": Threshold(0.25, "share of the reserve in free cached blocks from which it is "
                                                   "called fragmentation")},
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    memory = ev.memory
    share = memory.peak_share
    if share is None:
        yield Clean(why="the capacity of the device could not be read")
        return
    yield Margin(quantity="the step's memory over the capacity", value=round(share, 4), threshold=th.min_share, noise=0.0)
    if share < th.min_share:
        return
    kind, held = max(memory.kinds.items(), key=lambda item: item[1])
    remedy = _remedy(ev, kind)
    fragmented = memory.cached_free_bytes >= th.min_cached_free * memory.held_bytes
    cached = (f"; the caching allocator reserved {memory.held_bytes / 2**30:.3g} GB for it, "
              f"{memory.cached_free_bytes / 2**30:.3g} GB in free blocks it keeps cached (fragmentation)") if fragmented else ""
    fix = _fix(kind, remedy)
    if fragmented:
        fix = fix.model_copy(update={"summary": f"{fix.summary}; against the fragmentation, "
                                                f"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True ({EXPANDABLE})"})
    yield Finding(
        severity=Severity.HIGH if share >= th.high_share else Severity.MEDIUM,
        message=(f"the step's peak holds {memory.peak_bytes / 2**30:.3g} GB of the {memory.capacity_bytes / 2**30:.3g} GB "
                 f"{memory.capacity_kind}{cached} ({share:.0%} taken); {kind} hold {held / 2**30:.3g} GB of the peak "
                 f"({held / memory.peak_bytes:.0%}): no room for a larger batch or a longer input"),
        impact=None,
        evidence={"peak_bytes": memory.peak_bytes, "capacity_bytes": memory.capacity_bytes, "share": round(share, 4),
                  "kinds": memory.kinds, "largest_kind": kind, **remedy,
                  **({"reserved_bytes": memory.reserved_bytes, "cached_free_bytes": memory.cached_free_bytes}
                     if memory.reserved_bytes is not None else {})},
        locations=_places(ev, remedy),
        fix=fix,
    )


def _remedy(ev: Evidence, kind: str) -> dict[str, Any]:
    """What the verification applies: the repeated blocks checkpointed (a training step's activations), else
    autocast (activations or temporaries, in a step not under autocast yet), else nothing automatic."""
    if kind == "activations" and ev.target.mode == "train" and (blocks := repeated_blocks(ev.graph)) is not None:
        paths, block_type = blocks
        return {"remedy": "checkpoint", "blocks": paths, "block_type": block_type,
                **({"switch": ev.target.checkpointing_switch} if ev.target.checkpointing_switch else {})}
    if kind in ("activations", "temporaries") and ev.target.autocast is None:
        dtype = "float16" if ev.on_cuda and not is_ampere_or_newer(ev.env) else "bfloat16"
        return {"remedy": "autocast", "autocast_dtype": dtype}
    return {"remedy": None}


def repeated_blocks(graph: GraphCapture | None) -> tuple[list[str], str] | None:
    """(the paths, the type) of the indexed children of one container that run the same operators (``h.0`` ...
    ``h.11``), the container whose blocks run the most operators; None where there is none, or where its blocks
    hold a BatchNorm (a recomputation would update its running statistics twice)."""
    if graph is None:
        return None
    by_container: dict[str, dict[str, list[GraphNode]]] = {}
    for node in graph.nodes:
        parts = node.module_path.split(".") if node.op.startswith("call") and node.module_path else []
        for depth, part in enumerate(parts):
            if part.isdigit():
                by_container.setdefault(".".join(parts[:depth]), {}).setdefault(part, []).append(node)
    best: tuple[int, str, dict[str, list[GraphNode]]] | None = None
    for container, children in by_container.items():
        shapes = {_operators(container, index, nodes) for index, nodes in children.items()}
        operators = sum(len(nodes) for nodes in children.values())
        if (len(children) >= 2 and len(shapes) == 1 and len(next(iter(shapes))) >= MIN_BLOCK_OPERATORS
                and not any("BatchNorm" in node.module_type for nodes in children.values() for node in nodes)
                and (best is None or operators > best[0])):
            best = (operators, container, children)
    if best is None:
        return None
    _, container, children = best
    paths = [f"{container}.{index}" if container else index for index in sorted(children, key=int)]
    own = [node.module_type for node in children[sorted(children, key=int)[0]] if node.module_path == paths[0]]
    return paths, own[0] if own else "block"


def _operators(container: str, index: str, nodes: list[GraphNode]) -> tuple[tuple[str, str, str], ...]:
    """A block's operators in order, each at its path inside the block: equal for blocks that repeat."""
    prefix = f"{container}.{index}" if container else index
    return tuple((node.module_path[len(prefix):], node.module_type, node.target) for node in nodes)


def _places(ev: Evidence, remedy: dict[str, Any]) -> list[Location]:
    """Where the checkpointed blocks' own forward runs (the first block's first operator)."""
    if remedy["remedy"] != "checkpoint" or ev.graph is None:
        return []
    first = remedy["blocks"][0]
    for node in ev.graph.nodes:
        if node.op.startswith("call") and node.file and (node.module_path == first or node.module_path.startswith(first + ".")):
            return [Location.at(node.file, node.line, function=f"module {first}",
                                note=f"in {remedy['block_type']} ({_span(remedy['blocks'])}, {len(remedy['blocks'])} blocks): run "
                                     "each through torch.utils.checkpoint where it is called")]
    return []


def _span(paths: list[str]) -> str:
    return f"{paths[0]} ... {paths[-1]}"


def _fix(kind: str, remedy: dict[str, Any]) -> Fix:
    if remedy["remedy"] == "checkpoint" and (switch := remedy.get("switch")):
        return Fix(summary=(f"recompute the activations of the {len(remedy['blocks'])} {remedy['block_type']} blocks "
                            f"({_span(remedy['blocks'])}) in the backward with the model's own switch: {switch}"),
                   before="model = get_model()", after=f"model = get_model()\n{switch}", docs=DOCS)
    if remedy["remedy"] == "checkpoint":
        return Fix(summary=(f"recompute the activations of the {len(remedy['blocks'])} {remedy['block_type']} blocks "
                            f"({_span(remedy['blocks'])}) in the backward: call each through "
                            "torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)"),
                   before="for block in self.h:\n    x = block(x)",
                   after="for block in self.h:\n    x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)",
                   docs=DOCS)
    if remedy["remedy"] == "autocast":
        dtype = remedy["autocast_dtype"]
        return Fix(summary=f"run the step under torch.autocast(dtype=torch.{dtype}): its {kind} in half the bytes",
                   before="loss = loss_fn(model(x), y)",
                   after=f"with torch.autocast(device_type, dtype=torch.{dtype}):\n    loss = loss_fn(model(x), y)",
                   docs=DOCS + ["https://pytorch.org/docs/stable/amp.html"])
    return Fix(summary=ADVICE.get(kind, "find what holds the peak (the memory table) and shrink it"), docs=DOCS)


def _not_automatic(finding: Finding) -> str | None:
    if finding.evidence.get("remedy") is None:
        kind = finding.evidence.get("largest_kind", "")
        return (f"no automatic fix for a peak held by {kind}: {ADVICE.get(kind, 'shrink what holds it')}; "
                "apply it by hand")
    return None


@check.fix(tolerance=max(TOLERANCE.values()), tolerance_of=lambda finding: TOLERANCE[finding.evidence["remedy"]],
           measures="memory", expected=_not_automatic,
           what="the repeated blocks checkpointed (activations), else the step under bf16 autocast")
def fix(target, finding):
    """Checkpoint the blocks the finding names, in each fresh copy; or run the step under autocast."""
    import torch

    if finding.evidence["remedy"] == "checkpoint":
        blocks = finding.evidence["blocks"]

        def checkpointed(model: torch.nn.Module) -> None:
            for path in blocks:
                _recompute_in_backward(model.get_submodule(path))
        return replace_target(target, model_transforms=(*target.model_transforms, checkpointed))
    dtype = getattr(torch, finding.evidence["autocast_dtype"])
    return replace_target(target, autocast_dtype=dtype, grad_scaler=dtype is torch.float16 and target.mode == "train")


def _recompute_in_backward(block: Any) -> None:
    """The block's forward through torch.utils.checkpoint (non-reentrant: keyword arguments pass, the RNG state is
    kept for the recomputation), by a subclass of its own class: a deep copy of the model copies it as it is."""
    base = type(block)
    if base not in _CHECKPOINTED:
        _CHECKPOINTED[base] = type(f"Checkpointed{base.__name__}", (base,), {"forward": _checkpointed_forward})
    block.__class__ = _CHECKPOINTED[base]


_CHECKPOINTED: dict[type, type] = {}


def _checkpointed_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
    from torch.utils.checkpoint import checkpoint

    return checkpoint(super(type(self), self).forward, *args, use_reentrant=False, **kwargs)
