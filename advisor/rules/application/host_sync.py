"""Device-to-host synchronization inside the step.

What it detects:
    Calls in the step that make the host wait for the device and copy a value back:
    ``.item()``, ``float(t)`` / ``int(t)``, ``.tolist()``, ``.numpy()``, ``.cpu()``,
    ``if tensor:`` (``bool(t)``), and every call that runs an operator torch itself tags as
    waiting for its output's value or size (``data_dependent_output``,
    ``dynamic_output_shape``: ``nonzero``, boolean-mask indexing, ``unique``, ``bincount``,
    ``masked_select``, ``repeat_interleave`` without ``output_size``, ``one_hot`` without
    ``num_classes``, ``equal``: read from the run's own torch, not a list of names), and on
    GPU the CUDA sync APIs (``cudaStreamSynchronize``,
    ``cudaDeviceSynchronize``, ``cudaEventSynchronize``) and device-to-host copies. Each
    source line is reported with its count per step; TorchDynamo graph breaks on
    data-dependent operations are merged in at their lines. A read of a tensor made on the
    host (a factory without a device argument, NumPy interop, or computed from such tensors
    alone: ``int(i)`` for ``i`` in ``torch.randint(n, (b,))`` slicing a NumPy memmap) is no
    sync in any run: it is not counted, and is reported as INFO only when nothing else is.

Why it matters:
    A GPU runs ahead of Python only while Python does not ask for results. Each sync drains
    the launch queue: the GPU idles while the host waits, then the host launches into an empty
    queue. One sync per step costs little; one per layer, expert or loop iteration serializes
    the whole step. Syncs also break ``torch.compile`` graphs. On a CPU-only run the cost is
    small (there is no queue to drain), so CPU audits report these as LOW at most, saying what
    they would cost on a GPU: they bite when the same code runs there.

How to fix:
    Keep values on the device and decide on the device: ``torch.where(cond, a, b)`` instead of
    a Python ``if`` on a tensor; multiply by a mask instead of boolean indexing; accumulate
    metrics in a tensor and read them every N steps (deferred logging); use
    ``torch.nonzero_static(x, size=K)`` where a bound on the count is known.

Example:
    Before::

        for expert in self.experts:
            idx = (routes == i).nonzero()        # host waits, once per expert
            if scores.max().item() > 0.5: ...    # and again

    After::

        mask = routes == i                       # stays on the device
        out = torch.where(mask[:, None], expert(x), out)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

from advisor.evidence import Evidence
from advisor.opnames import SYNC_OPERATORS_TORCH_2_13
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Location, Severity, Threshold, Thresholds, rule
from advisor.sources import site_label
from advisor.trace.parse import SYNC_RUNTIME_CALLS, Op, SourceCall, Trace

# What a Python API of torch does, by how it syncs (the key selects the fix text): the reads of a value that run no
# operator of their own (``.tolist()``, ``.numpy()``) or whose operator is a Python protocol's (``if t:``).
SYNC_APIS = {
    "Tensor.item": "scalar", "Tensor.__float__": "scalar", "Tensor.__int__": "scalar",
    "Tensor.__index__": "scalar", "Tensor.__complex__": "scalar",
    "Tensor.__bool__": "branch", "torch.is_nonzero": "branch", "torch.equal": "branch",
    "torch.allclose": "branch", "Tensor.equal": "branch", "Tensor.allclose": "branch",
    "Tensor.tolist": "transfer", "Tensor.numpy": "transfer", "Tensor.cpu": "transfer",
}
# Every other call is judged by what its operators are: torch tags an operator whose output's value
# (data_dependent_output) or size (dynamic_output_shape) the host must wait for (Environment.sync_operators).
OPERATOR_KINDS = {"value": "scalar", "size": "dynamic"}
# Calls that run the autograd engine: their operators are the backward's, run by torch and the libraries' hooks
# (DDP's reducer reads its host-side map of used parameters), not a line the user can change.
BACKWARD_APIS = {"Tensor.backward", "backward", "torch.autograd.backward", "grad", "torch.autograd.grad"}

FIXES = {
    "scalar": "read scalars off the device once per N steps (accumulate in a tensor: deferred logging), "
              "or keep the arithmetic on the device",
    "branch": "decide on the device: torch.where(cond, a, b) instead of a Python `if` on a tensor",
    "transfer": "keep the data on the device in the step; move results to the host after the step "
                "(or with .to('cpu', non_blocking=True) into pinned memory, read later)",
    "dynamic": "use masks instead of boolean indexing (x * mask, torch.where(mask, x, 0)), "
               "torch.nonzero_static(x, size=K) when the count has a known bound, counts into a tensor of a known "
               "size instead of torch.unique/bincount (torch.zeros(C).index_add_(0, labels, ones)), and "
               "repeat_interleave with output_size",
    "cuda": "remove explicit torch.cuda.synchronize()/event waits from the step; synchronize only where a "
            "host needs the value",
}
SNIPPETS = {  # before / after for the pattern at the worst site
    "scalar": ("total += loss.item()  # every step", "total += loss.detach()  # read total.item() every N steps"),
    "branch": ("if scores.max() > 0.5:\n    x = x * 2", "x = torch.where(scores.max() > 0.5, x * 2, x)"),
    "transfer": ("stats = y.mean(0).tolist()  # inside the step", "stats = y.mean(0).detach()  # .tolist() after the step"),
    "dynamic": ("active = x[scores > 0.3]\nout = active.sum()", "mask = (scores > 0.3).unsqueeze(-1)\nout = (x * mask).sum()"),
    "cuda": ("torch.cuda.synchronize()  # inside the step", "# no explicit synchronize: the next host read syncs anyway"),
}
LABELS = {"scalar": ".item()/scalar read", "branch": "tensor used as a Python bool", "transfer": "copy to host",
          "dynamic": "data-dependent size (nonzero, boolean mask, unique)", "cuda": "CUDA sync API"}
DATA_DEPENDENT_BREAK = ("item()", "tolist", "numpy", "nonzero", "data-dependent", "data dependent",
                        "dynamic shape operator", "generic_jump", "Tensor.__bool__", "bool(")


@dataclass
class SyncSite:
    file: str
    line: int
    function: str = ""  # the CPU op it ran under, when the trace has no source for it
    kinds: set[str] = field(default_factory=set)
    count: int = 0
    apis: set[str] = field(default_factory=set)
    blocked_us: float = 0.0
    graph_break: str = ""
    exact: bool = True


@rule(
    slug="host-sync",
    code="ADV101",
    layer=Layer.APPLICATION,
    severity=Severity.MEDIUM,
    thresholds={
        "min_per_step": Threshold(1, "syncs per step on one line before it is reported", "count"),
        "loop_per_step": Threshold(2, "syncs per step on one line that mark it as inside a loop", "count"),
        "high_per_step": Threshold(8, "syncs per step in total that make the finding high on GPU", "count"),
    },
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    sites: dict[tuple[str, int, str], SyncSite] = {}
    host_reads: dict[tuple[str, int, str], SyncSite] = {}  # of host-made tensors: no device waits for them
    steps = 1
    if ev.trace is not None:
        steps = ev.trace.step_count
        syncing = Syncing(ev.trace, _sync_operators(ev))
        _from_calls(syncing, sites, host_reads, on_cuda=ev.on_cuda)
        if not ev.trace.source_annotated:  # recorded elsewhere: fall back to op frames
            _from_ops(syncing, sites)
        _from_cuda_runtime(syncing, sites)
        _from_device_to_host_copies(syncing, sites)
    if ev.graph is not None:
        _from_graph_breaks(ev, sites)

    reported = [s for s in sites.values() if s.count / steps >= th.min_per_step or (s.count == 0 and s.graph_break)]
    host_per_step = sum(s.count for s in host_reads.values()) / steps
    if not reported:
        if host_reads:
            yield _host_reads_only(host_reads, host_per_step, steps)
        else:
            yield Clean(why=f"no line of the user's code (nor of a library's above torch) synced the host in the {steps} profiled step(s)"
                        + ("" if ev.trace is not None else " (no trace: graph breaks on syncs only)"))
        return
    reported.sort(key=lambda s: (-s.count, s.file, s.line))
    total_per_step = sum(s.count for s in reported) / steps
    has_steps = ev.trace is None or bool(ev.trace.steps)
    unit = "per step" if has_steps else "in the trace (it marks no ProfilerStep)"
    # Without step markers a count is not a rate: nothing can be said to repeat per step.
    in_loop = [s for s in reported if s.file and s.count / steps >= th.loop_per_step] if has_steps else []
    blocked_ms = sum(s.blocked_us for s in reported) / steps / 1000.0
    step_ms = ev.step_ms

    if ev.on_cuda:
        many = has_steps and total_per_step >= th.high_per_step
        severity = Severity.HIGH if (many or in_loop) else Severity.MEDIUM
    else:  # no launch queue to drain on a CPU: the cost is the GPU's, said in the message
        severity = Severity.LOW
    kinds = sorted({k for s in reported for k in s.kinds})
    worst = reported[0]
    worst_label = ", ".join(sorted(worst.apis)) or LABELS[sorted(worst.kinds)[0]]
    message = (
        f"{_rate(total_per_step)} host sync(s) {unit} at {len(reported)} place(s); most at "
        f"{_place(worst)} ({worst_label}, {_rate(worst.count / steps)} {unit.split(' (')[0]})"
    )
    if in_loop:
        message += f"; {len(in_loop)} line(s) sync more than once per step (a loop)"
    if not ev.on_cuda:
        message += (". On this CPU run they cost little; on a GPU each one stalls the launch queue"
                    + (" (once per loop iteration where a line syncs in a loop)" if in_loop else ""))
    impact = blocked_ms / step_ms if (ev.on_cuda and step_ms) else None
    yield Finding(
        severity=severity,
        message=message,
        impact=impact,
        evidence={
            "syncs_per_step": round(total_per_step, 3),
            "lines": len(reported),
            "lines_in_loops": len(in_loop),
            "kinds": [LABELS[k] for k in kinds],
            **({"blocked_ms_per_step": round(blocked_ms, 3)} if ev.on_cuda else {}),
            "graph_breaks_on_syncs": sum(1 for s in reported if s.graph_break),
            "steps_profiled": steps,
            **({"host_tensor_reads_per_step": round(host_per_step, 3)} if host_reads else {}),
        },
        locations=[_location(s, steps) for s in reported],
        fix=Fix(
            summary="; ".join(FIXES[k] for k in kinds),
            before=SNIPPETS[sorted(worst.kinds)[0]][0],
            after=SNIPPETS[sorted(worst.kinds)[0]][1],
            docs=["https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#avoid-unnecessary-cpu-gpu-synchronization"],
        ),
    )


def _host_reads_only(host_reads: dict, per_step: float, steps: int) -> Finding:
    places = sorted(host_reads.values(), key=lambda s: (-s.count, s.file, s.line))
    return Finding(
        severity=Severity.INFO,
        message=(f"{_rate(per_step)} read(s) per step of tensors made on the host (no device argument, NumPy), at "
                 f"{_place(places[0])}: no device waits for these in any run, so they are not host syncs"),
        impact=None,
        evidence={"syncs_per_step": 0, "host_tensor_reads_per_step": round(per_step, 3), "steps_profiled": steps},
        locations=[_location(s, steps) for s in places],
        fix=Fix(summary="nothing to change: keep index tensors that only drive host-side slicing on the host"),
    )


def _site(sites: dict, file: str, line: int, exact: bool = True, function: str = "") -> SyncSite:
    key = (file, line, function)
    if key not in sites:
        sites[key] = SyncSite(file=file, line=line, exact=exact, function=function)
    return sites[key]


def _sync_operators(ev: Evidence) -> dict[str, str]:
    """The operators the host waits on, as the run's own torch tags them (else torch 2.13's)."""
    if ev.env is not None and ev.env.sync_operators:
        return ev.env.sync_operators
    return SYNC_OPERATORS_TORCH_2_13


class Syncing:
    """Which operators of a trace made the host wait, by what they are (torch's tags) and, for the three tagged by
    their schema whose arguments can fix the output's size, by the arguments the trace recorded."""

    def __init__(self, trace: Trace, operators: dict[str, str]):
        self.trace, self.operators = trace, operators

    def kind(self, op: Op) -> str | None:
        """'scalar' or 'dynamic' where ``op`` itself waits (an enclosing tagged operator speaks for what it runs)."""
        if op.name not in self.operators or self.under_tagged(op, strict=True) or self.size_given(op):
            return None
        return OPERATOR_KINDS[self.operators[op.name]]

    def under_tagged(self, op: Op, strict: bool = False) -> bool:
        """Whether ``op`` (unless ``strict``) or an operator enclosing it is tagged."""
        current = op if not strict else (self.trace.ops[op.parent] if op.parent is not None else None)
        while current is not None:
            if current.name in self.operators:
                return True
            current = self.trace.ops[current.parent] if current.parent is not None else None
        return False

    def size_given(self, op: Op) -> bool:
        """The arguments fix the output's size though the schema's tag says it may depend on the data: indexing by
        integer tensors (a boolean mask runs nonzero inside), repeat_interleave with output_size or an int count,
        one_hot with num_classes (on a GPU no wait; on a CPU torch checks the labels' bounds, its own read)."""
        concrete = list(op.concrete_inputs)
        if op.name == "aten::index":
            return not any(self.operators.get(inner.name) for inner in self._within(op))
        if op.name == "aten::repeat_interleave":
            return bool(concrete and concrete[-1]) or (len(concrete) >= 3 and bool(concrete[1]))
        if op.name == "aten::one_hot":
            return len(concrete) > 1 and concrete[1] not in ("", "-1")
        return False

    def first_in(self, indices: list[int]) -> str | None:
        """The kind of the first operator among a call's that waits."""
        for index in indices:
            if (kind := self.kind(self.trace.ops[index])) is not None:
                return kind
        return None

    def _within(self, op: Op) -> list[Op]:
        found, stack = [], list(self.trace.children(op))
        while stack:
            inner = stack.pop()
            found.append(inner)
            stack.extend(self.trace.children(inner))
        return found


def _from_calls(syncing: Syncing, sites: dict, host_reads: dict, on_cuda: bool) -> None:
    for call in syncing.trace.calls:
        if call.step is None and syncing.trace.steps:
            continue
        kind = _call_kind(syncing, call, on_cuda)
        if kind is None:
            continue
        site = _site(host_reads if call.host else sites, call.file, call.line)
        site.kinds.add(kind)
        site.apis.add(call.api.replace("Tensor.", ".").replace("torch.", "torch."))
        site.count += 1


def _call_kind(syncing: Syncing, call: SourceCall, on_cuda: bool) -> str | None:
    if call.api in SYNC_APIS:
        if call.api == "Tensor.cpu" and not on_cuda:
            # .cpu() on a CPU tensor is free; it syncs only when the step runs on a GPU
            return "transfer"
        return SYNC_APIS[call.api]
    if call.api in BACKWARD_APIS:
        return None
    # any other call waits where one of its operators is tagged so (unique, a boolean mask's index, bincount, ...)
    return syncing.first_in(call.ops)


def _from_ops(syncing: Syncing, sites: dict) -> None:
    trace = syncing.trace
    for op in trace.step_ops():
        kind = syncing.kind(op)  # None inside a tagged operator: _local_scalar_dense inside item counts once
        if kind is None:
            continue
        site = _op_site(trace, op, sites)
        site.kinds.add(kind)
        site.apis.add(op.name)
        site.count += 1


def _op_site(trace: Trace, op: Op, sites: dict) -> SyncSite:
    if op.src is not None:
        return _site(sites, op.src.file, op.src.line, exact=op.src.exact)
    return _site(sites, "", 0, exact=False, function=trace.outermost(op).name)


def _from_cuda_runtime(syncing: Syncing, sites: dict) -> None:
    trace = syncing.trace
    for event in trace.runtime:
        if event.name not in SYNC_RUNTIME_CALLS or (trace.steps and event.step is None):
            continue
        op: Op | None = trace.enclosing_op(event.tid, event.ts)
        if op is None:  # a bare API call (torch.cuda.synchronize() and friends)
            site = _site(sites, "", 0, exact=False, function=event.name)
            counted = False
        else:
            site = _op_site(trace, op, sites)
            counted = syncing.under_tagged(op) or (op.call is not None and trace.calls[op.call].api in SYNC_APIS)
        site.blocked_us += event.dur
        if counted and site.count:
            continue  # the sync API sits inside an op already counted at this line: add its time only
        site.kinds.add("cuda")
        site.apis.add(event.name)
        site.count += 1


def _from_device_to_host_copies(syncing: Syncing, sites: dict) -> None:
    """DtoH copies wait for the device; count those not already counted through a sync op."""
    trace = syncing.trace
    for copy in trace.memcpy:
        if "DtoH" not in copy.name or (trace.steps and copy.step is None):
            continue
        op = trace.launching_op(copy)
        if op is None:
            site = _site(sites, "", 0, exact=False, function=copy.name)
        else:
            if syncing.under_tagged(op) or (op.call is not None and trace.calls[op.call].api in SYNC_APIS):
                continue  # .item() and friends: the copy is how they sync, already counted
            site = _op_site(trace, op, sites)
        site.kinds.add("transfer")
        site.apis.add(copy.name)
        site.count += 1


def _from_graph_breaks(ev: Evidence, sites: dict) -> None:
    for brk in ev.graph.breaks:
        if not brk.file or not any(marker in brk.reason for marker in DATA_DEPENDENT_BREAK):
            continue
        site = _site(sites, brk.file, brk.line)
        site.graph_break = brk.reason
        if not site.kinds:
            site.kinds.add("scalar" if "item" in brk.reason else "dynamic")


def _location(site: SyncSite, steps: int) -> Location:
    notes = []
    if site.apis:
        notes.append(", ".join(sorted(site.apis)))
    if site.graph_break:
        notes.append(f"also breaks the torch.compile graph: {site.graph_break}")
    if not site.exact:
        notes.append("function-level: the trace names the function, not the line")
    return Location.at(site.file, site.line, function=site.function,
                       count_per_step=round(site.count / steps, 3), note="; ".join(notes))


def _rate(count: float) -> str:
    """A count per step as said: whole when it is, else to a tenth (a mean over the profiled steps, 21.7 rather
    than 21.6667)."""
    return f"{count:g}" if float(count).is_integer() else f"{count:.1f}"


def _place(site: SyncSite) -> str:
    if site.file:
        return site_label(site.file, site.line)
    return f"{site.function} (no source line in the trace)"


@check.advice_only
def expected(finding: Finding) -> str:
    """No rewrite removes a sync safely; say what the syncs cost instead (expected, not verified)."""
    blocked = finding.evidence.get("blocked_ms_per_step")
    if blocked is not None:
        return (f"no safe automatic rewrite; expected: up to {blocked:g} ms per step of host waiting "
                "(measured in the trace) and the GPU idle time behind it")
    return ("no safe automatic rewrite; on this CPU run the syncs cost no waiting, "
            "so the gain appears only when the step runs on a GPU")
