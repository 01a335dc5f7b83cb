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
from dataclasses import dataclass
from typing import Any

from advisor.sources import is_library_path
from advisor.trace.gc_pause import gc_paused
from advisor.trace.model import DeviceEvent, Op, ShapedOp, SourceCall, SourceRef, Span, Trace
from advisor.trace.stream import EventStream, TraceFormatError

__all__ = ["DeviceEvent", "Op", "ShapedOp", "SourceCall", "SourceRef", "Span", "Trace", "TraceFormatError", "parse_trace",
           "SOURCE_ANNOTATION", "HOST_READ", "ANNOTATED_MARKER", "STEP_PREFIX", "OPTIMIZER_STEP_PREFIX",
           "SYNC_RUNTIME_CALLS"]

SOURCE_ANNOTATION = "advisor.src:"
HOST_READ = "host:"  # after SOURCE_ANNOTATION: the call read a tensor made on the host (capture/provenance.py)
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


def parse_trace(path: str, only_ops: tuple[str, ...] | None = None) -> Trace:
    """Parse a Kineto trace into a Trace (see trace_model), with the cyclic GC paused (gc_pause).

    With ``only_ops``, only the CPU ops whose names start with one of these prefixes are built
    (and Python frames are skipped): a rank's summary reads its collective calls alone, and a
    trace's ops are most of what parsing builds. Such a trace's ops are not whole.
    """
    if not os.path.exists(path):
        raise TraceFormatError(f"{path}: no such file")
    with gc_paused():
        return _parse(path, only_ops)


def _parse(path: str, only_ops: tuple[str, ...] | None = None) -> Trace:
    stream = EventStream(path)
    trace = Trace(path=path)
    # the host events in the order read: each CPU op built as it is read (an Op, what the trace keeps), the
    # other ranges as HostRanges; the ops' nesting, steps and sources are filled in once all are sorted
    host_events: list[Op | HostRange] = []
    add_host, add_kernel, add_runtime = host_events.append, trace.kernels.append, trace.runtime.append
    names: dict[str, str] = {}  # one string per distinct name: a trace repeats a few hundred names
    shared = names.setdefault
    shared_tid = {}.setdefault  # and one int per thread id (28 bytes an event otherwise)
    for batch in stream.batches():  # looping over each decoded batch here saves a generator step per event
        for event in batch:
            if event.__class__ is not dict:
                continue
            get = event.get
            if get("ph") != "X":
                continue
            ts = get("ts")
            if ts.__class__ is not float and ts.__class__ is not int:  # the common cases, checked cheaply
                try:
                    ts = float(ts)
                except (TypeError, ValueError):
                    continue
            dur = get("dur") or 0.0
            if dur.__class__ is not float and dur.__class__ is not int:
                try:
                    dur = float(dur)
                except (TypeError, ValueError):
                    dur = 0.0
            cat = get("cat") or ""
            tid = get("tid", 0)
            tid = shared_tid(tid, tid) if tid.__class__ is int else _tid(tid)
            if cat in HOST_CATEGORIES:
                name = get("name") or ""
                name = shared(name, name)
                if name.startswith(_SPECIAL_HOST_NAMES):
                    if name.startswith(STEP_PREFIX):
                        trace.steps.append(Span(name, ts, dur))
                        continue
                    if name.startswith(OPTIMIZER_STEP_PREFIX):
                        trace.optimizer_steps.append(Span(name, ts, dur))
                        continue
                    if name == ANNOTATED_MARKER:
                        trace.source_annotated = True
                        continue
                    if cat == "user_annotation" and name.startswith(HOST_COLLECTIVE_PREFIXES):
                        trace.host_collectives.append(DeviceEvent(cat, name, ts, dur, tid=tid))
                        continue
                if only_ops is not None and (cat == "python_function" or cat == "cpu_op" and not name.startswith(only_ops)):
                    continue
                if cat != "cpu_op":
                    add_host(HostRange(tid, ts, dur, cat, name))
                    continue
                args = get("args")
                # what the ops keep of their args, taken now: the args dicts of every op at once were a third of
                # a trace's peak (a dict of a dozen members against the six values read)
                add_host(ShapedOp(name, ts, dur, tid, dur, input_dims=args["Input Dims"] or (),
                                  input_types=args.get("Input type") or (),
                                  input_strides=args.get("Input Strides") or (),
                                  concrete_inputs=args.get("Concrete Inputs") or (),
                                  sequence=args.get("Sequence number"), backward_node=bool(args.get("Fwd thread id")))
                         if args and "Input Dims" in args else Op(name, ts, dur, tid, dur))
            elif cat == "cuda_runtime" or cat == "cuda_driver":  # the most numerous device-side events
                correlation = (get("args") or _NO_ARGS).get("correlation")
                name = get("name") or ""
                add_runtime(DeviceEvent(cat, shared(name, name), ts, dur, None,
                                        correlation if correlation.__class__ is int else _integer(correlation), None, tid))
            elif cat == "kernel":
                name = get("name") or ""
                add_kernel(_device_event(cat, shared(name, name), ts, dur, get("args") or _NO_ARGS))
            elif cat == "gpu_memcpy" or cat == "gpu_memset":
                trace.memcpy.append(_device_event(cat, get("name") or "", ts, dur, get("args") or _NO_ARGS))
    trace.device_properties = list(stream.members.get("deviceProperties") or [])
    trace.distributed_info = dict(stream.members.get("distributedInfo") or {})
    trace.repaired_lines = stream.repaired_lines
    trace.steps = _last_of_each_step(trace.steps)
    _nest_host_events(trace, host_events)
    _assign_device_steps(trace)
    return trace


def _last_of_each_step(steps: list[Span]) -> list[Span]:
    """The steps in time order; a step named twice keeps its later range (advisor run enters a step's range
    again when the script leaves an evaluation pass inside it: the earlier range held the evaluation)."""
    latest = {step.name: step for step in sorted(steps, key=lambda s: s.ts)}
    return sorted(latest.values(), key=lambda s: s.ts)


# host names handled apart from ops; one startswith() tells the common case from them
_SPECIAL_HOST_NAMES = (STEP_PREFIX, OPTIMIZER_STEP_PREFIX, ANNOTATED_MARKER, *HOST_COLLECTIVE_PREFIXES)


def _tid(tid: Any) -> int:
    try:
        return int(tid)
    except (TypeError, ValueError):
        return hash(tid) & 0x7FFFFFFF


def _integer(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) else None


def _device_event(cat: str, name: str, ts: float, dur: float, args: dict) -> DeviceEvent:
    stream, correlation = args.get("stream"), args.get("correlation")
    event = DeviceEvent(cat, name, ts, dur, stream if stream.__class__ is int else _integer(stream),
                        correlation if correlation.__class__ is int else _integer(correlation))
    size = args.get("bytes")
    if isinstance(size, (int, float)):
        event.bytes = int(size)
    if "Collective name" in args:
        event.args = args  # collectives keep their metadata; other events' args are not needed
    return event


def _nest_host_events(trace: Trace, host_events: list[Op | HostRange]) -> None:
    """Walk each thread's events in time order with a stack: parents, self times, sources, steps.

    Events are sorted by thread, start, and longest first, so a parent
    comes before the ops it encloses. That is also the order of the per-thread op index that
    ``Trace.enclosing_op`` searches, which is built here on the way (as is ``Trace.children``'s). Each stack entry carries
    what an op inside it inherits (its depth and parent, the innermost annotated call, the
    innermost user frame, whether a DataLoader is producing a batch), so an op reads only the
    top entry. Each thread's events meet the (sorted) steps in time order too: a step cursor
    gives each op and call its step.
    """
    # three stable sorts on one member each, the last deciding first: the keys are the events' own numbers, where
    # one sort on (tid, ts, -dur) made a key tuple and a negated float per event at once
    host_events.sort(key=_DURATION, reverse=True)  # reverse=True keeps equal durations in their order too
    host_events.sort(key=_START)
    host_events.sort(key=_THREAD)
    # (end, ops enclosing, innermost enclosing op, innermost call, innermost user frame, loading)
    stack: list[tuple[float, int, int | None, int | None, SourceRef | None, bool]] = []
    outside = (0.0, 0, None, None, None, False)
    current_tid = None
    by_tid: dict[int, tuple[list[float], list[Op]]] = {}
    starts: list[float] = []
    thread_ops: list[Op] = []
    ops, calls = trace.ops, trace.calls
    call_sources: list[SourceRef | None] = []  # one per call, shared by the ops it ran
    # In a trace advisor annotated, an op no annotation encloses was not called by a line of the user's
    # (a library's model, autograd): its Python frames name library files by paths the profiler cut short.
    annotated = trace.source_annotated
    forward_sources: dict[int, SourceRef] = {}  # autograd's sequence number -> the user's line of the forward op
    backward_nodes: list[tuple[int, int]] = []  # (op, sequence number): resolved once every thread is read
    children: dict[int, list[int]] = {}  # Trace.children's index, made on the way: a second pass costs 8 ms a 69k trace
    step_starts = [step.ts for step in trace.steps]
    step_ends = [step.end for step in trace.steps]
    last_step = len(step_starts) - 1
    step = -1  # the last step starting at or before the event (-1: none yet)
    for event in host_events:
        tid, ts, dur = event.tid, event.ts, event.dur
        if tid != current_tid:
            stack.clear()
            current_tid = tid
            starts, thread_ops = by_tid.setdefault(tid, ([], []))
            step = -1
        while step < last_step and step_starts[step + 1] <= ts:
            step += 1
        while stack and stack[-1][0] <= ts:
            stack.pop()
        _, depth, parent, call, frame, loading = stack[-1] if stack else outside
        end = ts + dur
        if event.__class__ is not HostRange:  # an Op or a ShapedOp
            op, index = event, len(ops)
            op.step = step if step >= 0 and ts <= step_ends[step] else None
            op.depth, op.parent, op.index = depth, parent, index
            if parent is not None:
                ops[parent].self_dur -= dur
                if parent in children:
                    children[parent].append(index)
                else:
                    children[parent] = [index]
            if call is not None:
                op.call = call
                op.src = call_sources[call]
                calls[call].ops.append(index)
            elif frame is not None:
                op.src = frame
            if loading:
                op.loading = True
            if (sequence := op.sequence) is not None:
                if op.backward_node:  # what it runs undoes its forward's work
                    backward_nodes.append((index, sequence))
                elif op.src is not None and op.src.exact:
                    forward_sources.setdefault(sequence, op.src)
            ops.append(op)
            starts.append(ts)
            thread_ops.append(op)
            stack.append((end, depth + 1, index, call, frame, loading))
            continue
        cat, name = event.cat, event.name
        if cat == "user_annotation":
            if name.startswith(SOURCE_ANNOTATION):
                source_call = _parse_source_annotation(name, ts, dur, tid)
                if source_call is not None:
                    source_call.step = step if step >= 0 and ts <= step_ends[step] else None
                    calls.append(source_call)
                    # a library's call that no user line led to (advisor's harness running a library's model): a
                    # call for the rules that read calls (a sync in it), no source for its ops: not the user's line
                    call_sources.append(None if is_library_path(source_call.file) else
                                        SourceRef(source_call.file, source_call.line, source_call.api, exact=True))
                    stack.append((end, depth, parent, len(calls) - 1, frame, loading))
            elif name.startswith(LOADER_RANGE):
                stack.append((end, depth, parent, call, frame, True))
        elif cat == "python_function" and not annotated:  # annotated: calls name the user's lines
            user_frame = _user_frame(name)
            if user_frame is not None:
                stack.append((end, depth, parent, call, user_frame, loading))
    trace._by_tid = by_tid
    trace._children = children
    _attribute_backward(ops, children, backward_nodes, forward_sources)


def _attribute_backward(ops: list[Op], children: dict[int, list[int]], backward_nodes: list[tuple[int, int]],
                        forward_sources: dict[int, SourceRef]) -> None:
    """Each op a backward node runs (a copy undoing a view, say) gets the line of the forward op the node
    differentiates: the autograd thread of a GPU run may be read before the forward's."""
    for index, sequence in backward_nodes:
        source = forward_sources.get(sequence)
        if source is None:
            continue
        pending = [index]
        while pending:
            current = pending.pop()
            ops[current].grad_of = source
            pending.extend(children.get(current, ()))


@dataclass(slots=True)
class HostRange:
    """A host range other than a CPU op (an annotation, a Python frame) while the host events are sorted and nested:
    the sort's keys have an Op's names."""

    tid: int
    ts: float
    dur: float
    cat: str
    name: str


_THREAD, _START, _DURATION = operator.attrgetter("tid"), operator.attrgetter("ts"), operator.attrgetter("dur")


def _parse_source_annotation(name: str, ts: float, dur: float, tid: int) -> SourceCall | None:
    body = name[len(SOURCE_ANNOTATION):]
    api, sep, place = body.partition("@")
    file, sep2, line = place.rpartition(":")
    if not sep or not sep2 or not line.isdigit():
        return None
    host = api.startswith(HOST_READ)
    return SourceCall(api=api.removeprefix(HOST_READ), file=file, line=int(line), ts=ts, dur=dur, tid=tid, host=host)


def _user_frame(name: str) -> SourceRef | None:
    """``"model.py(12): forward"`` -> SourceRef, unless the frame is library code."""
    if name.startswith("nn.Module:"):
        return None
    head, sep, function = name.partition("): ")
    file, sep2, line = head.rpartition("(")
    if not sep or not sep2 or not line.isdigit() or is_library_path(file):
        return None
    return SourceRef(file=file, line=int(line), api=function, exact=False)


def _assign_device_steps(trace: Trace) -> None:
    """Runtime calls get the step they ran in; GPU activity the step that launched it."""
    if not trace.steps:
        return
    starts = [s.ts for s in trace.steps]
    ends = [s.end for s in trace.steps]
    find = bisect.bisect_right
    for call in trace.runtime:
        index = find(starts, call.ts) - 1
        call.step = index if index >= 0 and call.ts <= ends[index] else None
    launch_step = {r.correlation: r.step for r in trace.runtime if r.correlation is not None}
    for event in (*trace.kernels, *trace.memcpy):
        if event.correlation in launch_step:
            event.step = launch_step[event.correlation]
        else:
            index = find(starts, event.ts) - 1
            event.step = index if index >= 0 and event.ts <= ends[index] else None
