"""Parse a Kineto (Chrome trace) JSON file, as written by torch.profiler, into one Trace.

The same parser reads the traces advisor records and traces recorded elsewhere. Timestamps are
microseconds (floats with ns precision in newer traces). Each CPU op gets its self time, its
step (``ProfilerStep#N`` spans), its nesting depth and, where known, the user's source line:
from the ``advisor.src:`` annotations advisor's own profiling run writes, else from the
innermost Python frame outside the libraries (which names the function, not the line).
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass, field
from typing import Any, Iterable

from advisor.trace_stream import EventStream, TraceFormatError

SOURCE_ANNOTATION = "advisor.src:"
# Marks a trace recorded with source annotations: there, an op outside every advisor.src span
# was not called from user code (optimizer internals, autograd), rather than unattributed.
ANNOTATED_MARKER = "advisor.annotated"
# Runtime calls that block the host until the device (a stream, an event, everything) is done.
SYNC_RUNTIME_CALLS = frozenset({
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
    "hipStreamSynchronize", "hipDeviceSynchronize", "hipEventSynchronize",
})
STEP_PREFIX = "ProfilerStep#"

# Path fragments that mark a Python frame as library code rather than the user's.
LIBRARY_MARKERS = ("site-packages/", "dist-packages/", "torch/", "<built-in", "<frozen", "python3.",
                   "advisor/capture/", "advisor/target.py")  # advisor's own step runner, when not installed


HOST_CATEGORIES = frozenset({"cpu_op", "user_annotation", "python_function"})
_NO_ARGS: dict = {}


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
    input_dims: list | tuple = ()
    input_types: list | tuple = ()
    input_strides: list | tuple = ()
    concrete_inputs: list | tuple = ()  # scalar arguments as text ("False", "[1, 2]")


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
    args: dict = field(default_factory=dict)  # kept only for collectives (their NCCL metadata)


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
    ops: list[Op] = field(default_factory=list)
    calls: list[SourceCall] = field(default_factory=list)
    kernels: list[DeviceEvent] = field(default_factory=list)
    memcpy: list[DeviceEvent] = field(default_factory=list)
    runtime: list[DeviceEvent] = field(default_factory=list)  # cuda_runtime / cuda_driver calls
    device_properties: list[dict] = field(default_factory=list)
    distributed_info: dict = field(default_factory=dict)
    source_annotated: bool = False
    _by_tid: dict[int, tuple[list[float], list[Op]]] | None = field(default=None, repr=False, compare=False)
    _children: dict[int, list[int]] | None = field(default=None, repr=False, compare=False)
    _activity: list[DeviceEvent] | None = field(default=None, repr=False, compare=False)
    _launches: dict[int, DeviceEvent] | None = field(default=None, repr=False, compare=False)
    _activity_starts: list[float] = field(default_factory=list, repr=False, compare=False)
    _longest_activity: float = field(default=0.0, repr=False, compare=False)

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
        totals.sort()
        middle = len(totals) // 2
        return totals[middle] if len(totals) % 2 else (totals[middle - 1] + totals[middle]) / 2

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
        """Ops inside a profiled step (all ops when the trace has no step markers)."""
        if not self.steps:
            return self.ops
        return [o for o in self.ops if o.step is not None]

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
        return [o for o in self.step_ops() if o.depth == 0]


def parse_trace(path: str) -> Trace:
    if not os.path.exists(path):
        raise TraceFormatError(f"{path}: no such file")
    stream = EventStream(path)
    trace = Trace(path=path)
    host_events: list[tuple[float, float, int, str, str, dict]] = []
    for event in stream.events():
        if event.get("ph") != "X":
            continue
        ts = event.get("ts")
        if not isinstance(ts, (int, float)):
            try:
                ts = float(ts)
            except (TypeError, ValueError):
                continue
        dur = event.get("dur") or 0.0
        if not isinstance(dur, (int, float)):
            try:
                dur = float(dur)
            except (TypeError, ValueError):
                dur = 0.0
        cat = event.get("cat") or ""
        name = event.get("name") or ""
        if cat in HOST_CATEGORIES:
            if name.startswith(STEP_PREFIX):
                trace.steps.append(Span(name, ts, dur))
            elif name == ANNOTATED_MARKER:
                trace.source_annotated = True
            else:
                host_events.append((ts, dur, _tid(event), cat, name, event.get("args") or _NO_ARGS))
        elif cat == "kernel":
            trace.kernels.append(_device_event(cat, name, ts, dur, event.get("args") or _NO_ARGS))
        elif cat == "gpu_memcpy" or cat == "gpu_memset":
            trace.memcpy.append(_device_event(cat, name, ts, dur, event.get("args") or _NO_ARGS))
        elif cat == "cuda_runtime" or cat == "cuda_driver":
            runtime = _device_event(cat, name, ts, dur, event.get("args") or _NO_ARGS)
            runtime.tid = _tid(event)
            trace.runtime.append(runtime)
        elif name.startswith(STEP_PREFIX) and cat == "cpu_instant_event":
            trace.steps.append(Span(name, ts, dur))
    trace.device_properties = list(stream.members.get("deviceProperties") or [])
    trace.distributed_info = dict(stream.members.get("distributedInfo") or {})
    trace.steps.sort(key=lambda s: s.ts)
    _nest_host_events(trace, host_events)
    _assign_steps(trace)
    return trace


def _tid(event: dict) -> int:
    tid = event.get("tid", 0)
    try:
        return int(tid)
    except (TypeError, ValueError):
        return hash(tid) & 0x7FFFFFFF


def _device_event(cat: str, name: str, ts: float, dur: float, args: dict) -> DeviceEvent:
    correlation = args.get("correlation")
    stream = args.get("stream")
    event = DeviceEvent(
        cat, name, ts, dur,
        int(stream) if isinstance(stream, (int, float)) else None,
        int(correlation) if isinstance(correlation, (int, float)) else None,
    )
    size = args.get("bytes")
    if isinstance(size, (int, float)):
        event.bytes = int(size)
    if "Collective name" in args:
        event.args = args  # collectives keep their metadata; other events' args are not needed
    return event


def _nest_host_events(trace: Trace, host_events: list[tuple[float, float, int, str, str, dict]]) -> None:
    """Walk each thread's events in time order with a stack: parents, self times, sources."""
    host_events.sort(key=lambda e: (e[2], e[0], -e[1]))
    stack: list[tuple[float, str, Any]] = []  # (end, kind, payload)
    current_tid = None
    for ts, dur, tid, cat, name, args in host_events:
        if tid != current_tid:
            stack.clear()
            current_tid = tid
        end = ts + dur
        while stack and stack[-1][0] <= ts:
            stack.pop()
        if cat == "cpu_op":
            op = _make_op(name, ts, dur, tid, args)
            op.index = len(trace.ops)
            _attach_to_context(trace, op, stack)
            trace.ops.append(op)
            stack.append((end, "op", len(trace.ops) - 1))
        elif cat == "user_annotation" and name.startswith(SOURCE_ANNOTATION):
            call = _parse_source_annotation(name, ts, dur, tid)
            if call is not None:
                trace.calls.append(call)
                stack.append((end, "call", len(trace.calls) - 1))
        elif cat == "python_function":
            frame = _user_frame(name)
            if frame is not None:
                stack.append((end, "frame", frame))


def _make_op(name: str, ts: float, dur: float, tid: int, args: dict) -> Op:
    op = Op(name, ts, dur, tid, dur)
    if "Input Dims" in args:
        op.input_dims = args["Input Dims"] or ()
        op.input_types = args.get("Input type") or ()
        op.input_strides = args.get("Input Strides") or ()
        op.concrete_inputs = args.get("Concrete Inputs") or ()
    return op


def _attach_to_context(trace: Trace, op: Op, stack: list[tuple[float, str, Any]]) -> None:
    parent_op = None
    for _, kind, payload in reversed(stack):
        if kind == "op":
            if parent_op is None:
                parent_op = trace.ops[payload]
                op.parent = payload
            op.depth += 1
        elif kind == "call" and op.call is None:
            op.call = payload
            call = trace.calls[payload]
            op.src = SourceRef(call.file, call.line, call.api, exact=True)
            call.ops.append(len(trace.ops))
        elif kind == "frame" and op.src is None and op.call is None:
            op.src = payload
    if parent_op is not None:
        parent_op.self_dur -= op.dur


def _parse_source_annotation(name: str, ts: float, dur: float, tid: int) -> SourceCall | None:
    body = name[len(SOURCE_ANNOTATION):]
    api, sep, place = body.partition("@")
    file, sep2, line = place.rpartition(":")
    if not sep or not sep2 or not line.isdigit():
        return None
    return SourceCall(api=api, file=file, line=int(line), ts=ts, dur=dur, tid=tid)


def _user_frame(name: str) -> SourceRef | None:
    """``"model.py(12): forward"`` -> SourceRef, unless the frame is library code."""
    if any(marker in name for marker in LIBRARY_MARKERS) or name.startswith("nn.Module:"):
        return None
    head, sep, function = name.partition("): ")
    file, sep2, line = head.rpartition("(")
    if not sep or not sep2 or not line.isdigit():
        return None
    return SourceRef(file=file, line=int(line), api=function, exact=False)


def _assign_steps(trace: Trace) -> None:
    if not trace.steps:
        return
    starts = [s.ts for s in trace.steps]

    def step_of(ts: float) -> int | None:
        index = bisect.bisect_right(starts, ts) - 1
        if index >= 0 and ts <= trace.steps[index].end:
            return index
        return None

    for item in _all_host_timed(trace):
        item.step = step_of(item.ts)
    launch_step = {r.correlation: r.step for r in trace.runtime if r.correlation is not None}
    for event in (*trace.kernels, *trace.memcpy):
        event.step = launch_step.get(event.correlation, step_of(event.ts))


def _all_host_timed(trace: Trace) -> Iterable[Op | SourceCall | DeviceEvent]:
    yield from trace.ops
    yield from trace.calls
    yield from trace.runtime
