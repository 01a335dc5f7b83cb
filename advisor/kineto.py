"""Parse a Kineto (Chrome trace) JSON file, as written by torch.profiler, into one Trace.

The same parser reads the traces advisor records and traces recorded elsewhere. Timestamps are
microseconds (floats with ns precision in newer traces). Each CPU op gets its self time, its
step (``ProfilerStep#N`` spans), its nesting depth and, where known, the user's source line:
from the ``advisor.src:`` annotations advisor's own profiling run writes, else from the
innermost Python frame outside the libraries (which names the function, not the line).
"""

from __future__ import annotations

import bisect
import operator
import os
from typing import Any, Iterable

from advisor.gc_pause import gc_paused
from advisor.sources import is_library_path
from advisor.trace_model import DeviceEvent, Op, SourceCall, SourceRef, Span, Trace
from advisor.trace_stream import EventStream, TraceFormatError

__all__ = ["DeviceEvent", "Op", "SourceCall", "SourceRef", "Span", "Trace", "TraceFormatError", "parse_trace",
           "SOURCE_ANNOTATION", "ANNOTATED_MARKER", "STEP_PREFIX", "OPTIMIZER_STEP_PREFIX",
           "SYNC_RUNTIME_CALLS"]

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
OPTIMIZER_STEP_PREFIX = "Optimizer.step#"  # torch.optim's record_function around every step()

HOST_CATEGORIES = frozenset({"cpu_op", "user_annotation", "python_function"})
# ProcessGroupGloo records each collective's work as a "gloo:<collective>" range on the thread that runs it
HOST_COLLECTIVE_PREFIXES = ("gloo:",)
# torch's DataLoader marks each batch it produces with this range: ops inside it load data
LOADER_RANGE = "enumerate(DataLoader)#"
_NO_ARGS: dict = {}


def parse_trace(path: str) -> Trace:
    """Parse a Kineto trace into a Trace (see trace_model), with the cyclic GC paused (gc_pause)."""
    if not os.path.exists(path):
        raise TraceFormatError(f"{path}: no such file")
    with gc_paused():
        return _parse(path)


def _parse(path: str) -> Trace:
    stream = EventStream(path)
    trace = Trace(path=path)
    host_events: list[tuple[int, float, float, str, str, dict]] = []
    add_host, add_kernel, add_runtime = host_events.append, trace.kernels.append, trace.runtime.append
    for event in stream.events():
        if event.get("ph") != "X":
            continue
        ts = event.get("ts")
        if ts.__class__ is not float and ts.__class__ is not int:  # the common cases, checked cheaply
            try:
                ts = float(ts)
            except (TypeError, ValueError):
                continue
        dur = event.get("dur") or 0.0
        if dur.__class__ is not float and dur.__class__ is not int:
            try:
                dur = float(dur)
            except (TypeError, ValueError):
                dur = 0.0
        cat = event.get("cat") or ""
        name = event.get("name") or ""
        if cat in HOST_CATEGORIES:
            if name.startswith(STEP_PREFIX):
                trace.steps.append(Span(name, ts, dur))
            elif name.startswith(OPTIMIZER_STEP_PREFIX):
                trace.optimizer_steps.append(Span(name, ts, dur))
            elif name == ANNOTATED_MARKER:
                trace.source_annotated = True
            elif cat == "user_annotation" and name.startswith(HOST_COLLECTIVE_PREFIXES):
                trace.host_collectives.append(DeviceEvent(cat, name, ts, dur, tid=_tid(event)))
            else:
                add_host((_tid(event), ts, -dur, cat, name, event.get("args") or _NO_ARGS))
        elif cat == "cuda_runtime" or cat == "cuda_driver":  # the most numerous device-side events
            correlation = (event.get("args") or _NO_ARGS).get("correlation")
            add_runtime(DeviceEvent(cat, name, ts, dur, None,
                                    correlation if correlation.__class__ is int else _integer(correlation),
                                    None, _tid(event)))
        elif cat == "kernel":
            add_kernel(_device_event(cat, name, ts, dur, event.get("args") or _NO_ARGS))
        elif cat == "gpu_memcpy" or cat == "gpu_memset":
            trace.memcpy.append(_device_event(cat, name, ts, dur, event.get("args") or _NO_ARGS))
    trace.device_properties = list(stream.members.get("deviceProperties") or [])
    trace.distributed_info = dict(stream.members.get("distributedInfo") or {})
    trace.repaired_lines = stream.repaired_lines
    trace.steps.sort(key=lambda s: s.ts)
    _nest_host_events(trace, host_events)
    _assign_steps(trace)
    return trace


def _tid(event: dict) -> int:
    tid = event.get("tid", 0)
    if tid.__class__ is int:
        return tid
    try:
        return int(tid)
    except (TypeError, ValueError):
        return hash(tid) & 0x7FFFFFFF


def _integer(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) else None


def _device_event(cat: str, name: str, ts: float, dur: float, args: dict) -> DeviceEvent:
    event = DeviceEvent(cat, name, ts, dur, _integer(args.get("stream")), _integer(args.get("correlation")))
    size = args.get("bytes")
    if isinstance(size, (int, float)):
        event.bytes = int(size)
    if "Collective name" in args:
        event.args = args  # collectives keep their metadata; other events' args are not needed
    return event


def _nest_host_events(trace: Trace, host_events: list[tuple[int, float, float, str, str, dict]]) -> None:
    """Walk each thread's events in time order with a stack: parents, self times, sources.

    Events are (tid, ts, -dur, ...): sorted by thread, start, and longest first, so a parent
    comes before the ops it encloses. That is also the order of the per-thread op index that
    ``Trace.enclosing_op`` searches, which is built here on the way.
    """
    host_events.sort(key=_HOST_ORDER)
    stack: list[tuple[float, str, Any]] = []  # (end, kind, payload)
    current_tid = None
    by_tid: dict[int, tuple[list[float], list[Op]]] = {}
    starts: list[float] = []
    thread_ops: list[Op] = []
    for tid, ts, negative_dur, cat, name, args in host_events:
        dur = -negative_dur
        if tid != current_tid:
            stack.clear()
            current_tid = tid
            starts, thread_ops = by_tid.setdefault(tid, ([], []))
        end = ts + dur
        while stack and stack[-1][0] <= ts:
            stack.pop()
        if cat == "cpu_op":
            op = _make_op(name, ts, dur, tid, args)
            op.index = len(trace.ops)
            _attach_to_context(trace, op, stack)
            trace.ops.append(op)
            starts.append(ts)
            thread_ops.append(op)
            stack.append((end, "op", len(trace.ops) - 1))
        elif cat == "user_annotation" and name.startswith(SOURCE_ANNOTATION):
            call = _parse_source_annotation(name, ts, dur, tid)
            if call is not None:
                trace.calls.append(call)
                stack.append((end, "call", len(trace.calls) - 1))
        elif cat == "user_annotation" and name.startswith(LOADER_RANGE):
            stack.append((end, "loading", None))
        elif cat == "python_function":
            frame = _user_frame(name)
            if frame is not None:
                stack.append((end, "frame", frame))
    trace._by_tid = by_tid


_HOST_ORDER = operator.itemgetter(0, 1, 2)


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
        elif kind == "loading":
            op.loading = True
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
    if name.startswith("nn.Module:"):
        return None
    head, sep, function = name.partition("): ")
    file, sep2, line = head.rpartition("(")
    if not sep or not sep2 or not line.isdigit() or is_library_path(file):
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
