"""The trace data model: CPU ops, annotated user calls, GPU activity, steps — and queries on them.

Built by ``advisor.trace.parse.parse_trace``; rules read it. Times are microseconds.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import ClassVar, Iterable

from advisor.stats import median


@dataclass(slots=True)
class SourceRef:
    file: str
    line: int
    api: str = ""  # the torch API the user called on that line ("Tensor.item", "linear")
    exact: bool = True  # False when only the enclosing function is known (python frame)


@dataclass(slots=True)
class Op:
    name: str
    ts: float
    dur: float
    tid: int
    self_dur: float = 0.0
    step: int | None = None
    depth: int = 0  # number of enclosing CPU ops
    parent: int | None = None  # index into Trace.ops of the enclosing CPU op
    index: int = -1  # its own position in Trace.ops
    src: SourceRef | None = None
    call: int | None = None  # index into Trace.calls of the annotated user call that ran it
    loading: bool = False  # run by a DataLoader producing a batch (inside its enumerate(DataLoader) range)
    grad_of: SourceRef | None = None  # run by a backward node: the user's line of the forward op it differentiates
    # What a trace recorded with shapes adds, read as an op's: a ShapedOp holds them, any other op has none. Kept
    # off the ops of traces without shapes (HTA's, most recorded elsewhere): 6 slots, 48 bytes an op.
    input_dims: ClassVar[list | tuple] = ()
    input_types: ClassVar[list | tuple] = ()
    input_strides: ClassVar[list | tuple] = ()
    concrete_inputs: ClassVar[list | tuple] = ()  # scalar arguments as text ("False", "[1, 2]")
    sequence: ClassVar[int | None] = None  # autograd's sequence number: a forward op and its backward node share it
    backward_node: ClassVar[bool] = False  # run by autograd's engine for a backward node


@dataclass(slots=True)
class ShapedOp(Op):
    """An op of a trace recorded with shapes (``record_shapes``): its inputs, and autograd's link to its forward."""

    input_dims: list | tuple = ()
    input_types: list | tuple = ()
    input_strides: list | tuple = ()
    concrete_inputs: list | tuple = ()
    sequence: int | None = None
    backward_node: bool = False


@dataclass(slots=True)
class SourceCall:
    """One torch API call made from the user's code, as annotated by advisor's profiling run."""

    api: str
    file: str
    line: int
    ts: float
    dur: float
    tid: int
    step: int | None = None
    ops: list[int] = field(default_factory=list)  # indices of every op it ran, nested ones too
    host: bool = False  # it read a tensor made on the host: no device waits for it in any run


@dataclass(slots=True)
class DeviceEvent:
    cat: str
    name: str
    ts: float
    dur: float
    stream: int | None = None
    correlation: int | None = None
    step: int | None = None
    tid: int | None = None  # host thread, for runtime calls
    bytes: int = 0  # copies and memsets
    args: dict | None = None  # kept only for collectives (their NCCL metadata)


@dataclass(slots=True)
class Span:
    name: str
    ts: float
    dur: float

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass
class Trace:
    path: str
    steps: list[Span] = field(default_factory=list)
    optimizer_steps: list[Span] = field(default_factory=list)  # torch.optim's Optimizer.step#<class>.step ranges
    ops: list[Op] = field(default_factory=list)
    calls: list[SourceCall] = field(default_factory=list)
    kernels: list[DeviceEvent] = field(default_factory=list)
    memcpy: list[DeviceEvent] = field(default_factory=list)
    runtime: list[DeviceEvent] = field(default_factory=list)  # cuda_runtime / cuda_driver calls
    # collectives as a CPU backend runs them (gloo's "gloo:all_reduce" ranges, on its own worker threads)
    host_collectives: list[DeviceEvent] = field(default_factory=list)
    device_properties: list[dict] = field(default_factory=list)
    distributed_info: dict = field(default_factory=dict)
    source_annotated: bool = False
    repaired_lines: int = 0  # names the profiler wrote with bare double quotes, repaired while parsing
    # per thread: op start times and ops, ordered by (start, longest first); parse_trace fills it
    _by_tid: dict[int, tuple[list[float], list[Op]]] | None = field(default=None, repr=False, compare=False)
    _children: dict[int, list[int]] | None = field(default=None, repr=False, compare=False)
    _activity: list[DeviceEvent] | None = field(default=None, repr=False, compare=False)
    _launches: dict[int, DeviceEvent] | None = field(default=None, repr=False, compare=False)
    _activity_starts: list[float] = field(default_factory=list, repr=False, compare=False)
    _longest_activity: float = field(default=0.0, repr=False, compare=False)
    # (len(ops) when made, step_ops(), top_ops()): copies are handed out, so a caller may change its list
    _step_ops: tuple[int, list[Op], list[Op]] | None = field(default=None, repr=False, compare=False)
    # (len(ops), the roofs' key when made, roofline.operator_rates()): the report and below-roof both read them
    _operator_rates: tuple[int, str, list] | None = field(default=None, repr=False, compare=False)

    @property
    def has_gpu(self) -> bool:
        return bool(self.kernels or self.memcpy)

    @property
    def step_count(self) -> int:
        return max(len(self.steps), 1)

    def mean_step_us(self) -> float:
        if self.steps:
            return sum(s.dur for s in self.steps) / len(self.steps)
        if not self.ops:
            return 0.0
        return max(o.ts + o.dur for o in self.ops) - min(o.ts for o in self.ops)

    def median_per_step(self, items: Iterable[Op]) -> float:
        """Median over the profiled steps of the summed duration of ``items`` (µs).

        A median, not a mean: one step disturbed by the machine must not set the figure.
        Without step markers, the total.
        """
        if not self.steps:
            return sum(item.dur for item in items)
        totals = [0.0] * len(self.steps)
        for item in items:
            if item.step is not None:
                totals[item.step] += item.dur
        return median(totals)

    def median_span_per_step(self, spans: Iterable[Span]) -> float:
        """Like ``median_per_step`` for ranges that carry no step: each counts in the step it starts in."""
        if not self.steps:
            return sum(span.dur for span in spans)
        starts = [step.ts for step in self.steps]
        totals = [0.0] * len(self.steps)
        for span in spans:
            index = bisect.bisect_right(starts, span.ts) - 1
            if index >= 0 and span.ts < self.steps[index].end:
                totals[index] += span.dur
        return median(totals)

    def gpu_gaps(self, span: Span) -> tuple[float, list[tuple[float, float, DeviceEvent | None]]]:
        """GPU busy µs within ``span`` and its idle gaps (start, end, the activity that ended each gap).

        Counts every kernel, copy and memset running inside the span, whichever step launched
        it: the GPU runs behind the host, so a step's kernels mostly execute in later spans.
        """
        if self._activity is None:
            self._activity = sorted((*self.kernels, *self.memcpy), key=lambda e: e.ts)
            self._activity_starts = [e.ts for e in self._activity]
            self._longest_activity = max((e.dur for e in self._activity), default=0.0)
        first = bisect.bisect_left(self._activity_starts, span.ts - self._longest_activity)
        last = bisect.bisect_left(self._activity_starts, span.end)
        busy, gaps, cursor = 0.0, [], span.ts
        for event in self._activity[first:last]:
            if event.ts + event.dur <= span.ts:
                continue
            start, end = max(event.ts, span.ts), min(event.ts + event.dur, span.end)
            if start > cursor:
                gaps.append((cursor, start, event))
            if end > cursor:
                busy += end - max(start, cursor)
                cursor = end
        if span.end > cursor:
            gaps.append((cursor, span.end, None))
        return busy, gaps

    def step_ops(self) -> list[Op]:
        """Ops inside a profiled step (all ops when the trace has no step markers), less those a
        DataLoader ran to produce a batch: loading is the data's share, judged apart (a loop's
        step, under advisor run, spans its next batch)."""
        if self._step_ops is None or self._step_ops[0] != len(self.ops):  # read by most rules: made once
            if not self.steps:
                found = [o for o in self.ops if not o.loading]
            else:
                found = [o for o in self.ops if o.step is not None and not o.loading]
            self._step_ops = (len(self.ops), found, [o for o in found if o.depth == 0])
        return list(self._step_ops[1])

    def enclosing_op(self, tid: int | None, ts: float) -> Op | None:
        """The innermost CPU op on thread ``tid`` running at ``ts`` (e.g. around a CUDA API call).

        A binary search for the last op starting at or before ``ts``, then up its parents to the
        first that is still running: ops nest, so that is the innermost one.
        """
        if self._by_tid is None:
            self._by_tid = {}
            for op in self.ops:
                self._by_tid.setdefault(op.tid, ([], []))
                self._by_tid[op.tid][0].append(op.ts)
                self._by_tid[op.tid][1].append(op)
            for starts, ops in self._by_tid.values():
                order = sorted(range(len(ops)), key=lambda i: (starts[i], -ops[i].dur))
                starts[:] = [starts[i] for i in order]
                ops[:] = [ops[i] for i in order]
        starts, ops = self._by_tid.get(tid, ((), ()))
        index = bisect.bisect_right(starts, ts) - 1
        if index < 0:
            return None
        op: Op | None = ops[index]
        while op is not None and not (op.ts <= ts <= op.ts + op.dur):
            op = self.ops[op.parent] if op.parent is not None else None
        return op

    def launch_of(self, event: DeviceEvent) -> DeviceEvent | None:
        """The runtime call (cudaLaunchKernel, cudaMemcpyAsync, ...) that issued a GPU event."""
        if self._launches is None:
            self._launches = {r.correlation: r for r in self.runtime if r.correlation is not None}
        return self._launches.get(event.correlation)

    def launching_op(self, event: DeviceEvent) -> Op | None:
        """The innermost CPU op that issued a GPU event (through its runtime call)."""
        launch = self.launch_of(event)
        return self.enclosing_op(launch.tid, launch.ts) if launch is not None else None

    def place(self, op: Op | None, fallback: str = "") -> tuple[str, int, str]:
        """Where to point a user: (file, line, framework op) — file and line empty when unknown."""
        if op is None:
            return "", 0, fallback
        name = self.outermost(op).name
        if op.src is not None:
            return op.src.file, op.src.line, name
        return "", 0, name

    def children(self, op: Op) -> list[Op]:
        """The ops dispatched directly by ``op``."""
        if self._children is None:
            self._children = {}
            for other in self.ops:
                if other.parent is not None:
                    self._children.setdefault(other.parent, []).append(other.index)
        return [self.ops[i] for i in self._children.get(op.index, ())]

    def outermost(self, op: Op) -> Op:
        """The framework op a user would recognise (aten::item, not its _local_scalar_dense)."""
        while op.parent is not None:
            op = self.ops[op.parent]
        return op

    def top_ops(self) -> list[Op]:
        """The ops the framework was asked for, not the ops they dispatch to internally."""
        self.step_ops()
        return list(self._step_ops[2])

