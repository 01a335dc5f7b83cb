"""Parse a Kineto (Chrome trace) JSON file, as written by torch.profiler, into one Trace.

The same parser reads the traces advisor records and traces recorded elsewhere. Timestamps are
microseconds (floats with ns precision in newer traces). Each CPU op gets its self time, its
step (``ProfilerStep#N`` spans), its nesting depth and, where known, the user's source line:
from the ``advisor.src:`` annotations advisor's own profiling run writes, else from the
innermost Python frame outside the libraries (which names the function, not the line).
"""

from __future__ import annotations

import bisect
import gzip
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

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


class TraceFormatError(ValueError):
    """The file is not a readable Kineto trace; the message names the file and the problem."""


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


def _is_gzip(path: str) -> bool:
    with open(path, "rb") as handle:
        return handle.read(2) == b"\x1f\x8b"


_EVENT_BOUNDARY = re.compile(r"\}\s*,\s*(?=\{)")


class _EventStream:
    """Decode a Kineto JSON document one trace event at a time.

    The top-level object's small members (deviceProperties, distributedInfo, ...) are decoded
    whole; the ``traceEvents`` array is yielded element by element, so a large trace is never
    held as one list of dicts. Errors name the file and what is wrong with it.
    """

    CHUNK = 1 << 20

    def __init__(self, path: str):
        self.path = path
        self.members: dict[str, Any] = {}
        self._decoder = json.JSONDecoder()
        self._buffer = ""
        self._pos = 0
        self._eof = False
        self._line_base = 1
        opener = gzip.open if _is_gzip(path) else open
        self._handle = opener(path, "rt", encoding="utf-8")

    def _fill(self) -> bool:
        if self._eof:
            return False
        try:
            chunk = self._handle.read(self.CHUNK)
        except (EOFError, gzip.BadGzipFile, OSError) as broken:
            raise TraceFormatError(f"{self.path}: the gzip stream is truncated or corrupt ({broken})") from None
        except UnicodeDecodeError:
            raise TraceFormatError(f"{self.path}: not a text JSON file") from None
        if not chunk:
            self._eof = True
            return False
        self._line_base += self._buffer.count("\n", 0, self._pos)
        self._buffer = self._buffer[self._pos:] + chunk
        self._pos = 0
        return True

    def _peek(self) -> str:
        while True:
            while self._pos < len(self._buffer) and self._buffer[self._pos] in " \t\r\n":
                self._pos += 1
            if self._pos < len(self._buffer):
                return self._buffer[self._pos]
            if not self._fill():
                return ""

    def _expect(self, chars: str) -> str:
        found = self._peek()
        if not found or found not in chars:
            where = "the end of the file (it may be truncated)" if not found else repr(found)
            raise TraceFormatError(f"{self.path}: expected {' or '.join(map(repr, chars))} at line "
                                   f"{self._line()}, found {where}")
        self._pos += 1
        return found

    def _line(self) -> int:
        return self._line_base + self._buffer.count("\n", 0, self._pos)

    def _where(self, pos: int) -> tuple[int, int]:
        line = self._line_base + self._buffer.count("\n", 0, pos)
        return line, pos - self._buffer.rfind("\n", 0, pos)

    def _value(self) -> Any:
        self._peek()
        while True:
            try:
                value, end = self._decoder.raw_decode(self._buffer, self._pos)
            except json.JSONDecodeError as broken:
                if self._fill():
                    continue  # the value may run past the buffer: read on, decide at the end
                if broken.pos >= len(self._buffer) - 1 or "Unterminated" in broken.msg:
                    raise TraceFormatError(f"{self.path}: the file ends inside a value at line {self._line()}; "
                                           "it is truncated") from None
                line, column = self._where(broken.pos)
                raise TraceFormatError(f"{self.path}: not valid JSON at line {line}, column {column} "
                                       f"({broken.msg})") from None
            if end == len(self._buffer) and not self._eof and isinstance(value, (int, float)) and self._fill():
                continue  # a number may continue in the next chunk
            self._pos = end
            return value

    def events(self) -> Iterator[dict]:
        """Yield the trace events; the other members are in ``members`` once this is exhausted."""
        try:
            first = self._peek()
            if first == "[":  # a bare array of events
                yield from self._array()
                return
            self._expect("{")
            found_events = False
            if self._peek() == "}":
                self._pos += 1
            else:
                while True:
                    key = self._value()
                    if not isinstance(key, str):
                        raise TraceFormatError(f"{self.path}: expected a member name at line {self._line()}")
                    self._expect(":")
                    if key == "traceEvents":
                        found_events = True
                        if self._peek() != "[":
                            raise TraceFormatError(f"{self.path}: 'traceEvents' is not a list")
                        yield from self._array()
                    else:
                        self.members[key] = self._value()
                    if self._expect(",}") == "}":
                        break
            if not found_events:
                raise TraceFormatError(f"{self.path}: no 'traceEvents' list; this is not a Kineto/Chrome trace")
        finally:
            self._handle.close()

    def _batch(self) -> list[dict]:
        """Decode many whole events with one C-level json.loads, up to the last "},{" in the buffer.

        A boundary that falls inside a string makes that parse fail; then nothing is taken and
        the events are decoded one by one, so the shortcut never changes the result.
        """
        if self._buffer[self._pos:self._pos + 1] != "{" or len(self._buffer) - self._pos < self.CHUNK // 4:
            self._peek()
            if not self._eof and len(self._buffer) - self._pos < self.CHUNK // 4:
                self._fill()
        match = None
        for match in _EVENT_BOUNDARY.finditer(self._buffer, max(self._pos, len(self._buffer) - 65536)):
            pass
        if match is None or match.start() <= self._pos:
            return []
        try:
            events = json.loads("[" + self._buffer[self._pos:match.start() + 1] + "]")
        except json.JSONDecodeError:
            return []
        self._pos = match.start() + 1
        self._expect(",")
        return [e for e in events if isinstance(e, dict)]

    def _array(self) -> Iterator[dict]:
        self._expect("[")
        if self._peek() == "]":
            self._pos += 1
            return
        while True:
            yield from self._batch()
            value = self._value()
            if isinstance(value, dict):
                yield value
            if self._expect(",]") == "]":
                return
            if self._pos > self.CHUNK:  # drop what has been decoded
                self._line_base += self._buffer.count("\n", 0, self._pos)
                self._buffer = self._buffer[self._pos:]
                self._pos = 0


def parse_trace(path: str) -> Trace:
    if not os.path.exists(path):
        raise TraceFormatError(f"{path}: no such file")
    stream = _EventStream(path)
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
