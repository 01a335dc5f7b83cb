"""What each profiled step asked of torch, read from the trace: the operators the script called (not those they
dispatch to) and the elements of their tensor inputs, in all and by the user's line.

The same code on the same shapes asks the same of torch in every step, however long each step takes on a busy
machine; a history concatenated each step, or a loop over a growing list, asks more each time. step-drift reads
this to tell a step whose own work grows from one the machine merely ran slower.
"""

from __future__ import annotations

from math import prod

from advisor.machine.step_log import LineWork, StepWork
from advisor.trace.model import Trace


def profiled_work(trace: Trace) -> list[StepWork]:
    """Each profiled step's work, in the steps' order; empty for a trace without step markers."""
    if not trace.steps:
        return []
    steps = [[0, 0, {}] for _ in trace.steps]
    for op in trace.top_ops():
        if op.step is None:
            continue
        elements = _elements(op.input_dims)
        work = steps[op.step]
        work[0] += 1
        work[1] += elements
        ref = op.src or op.grad_of
        if ref is not None:
            line = work[2].setdefault((ref.file, ref.line), [0, 0])
            line[0] += 1
            line[1] += elements
    return [StepWork(step=index, operators=operators, elements=elements,
                     lines=[LineWork(file=file, line=line, operators=count, elements=size)
                            for (file, line), (count, size) in sorted(lines.items(), key=lambda item: -item[1][1])])
            for index, (operators, elements, lines) in enumerate(steps)]


def _elements(dims: list | tuple) -> int:
    """The elements of an operator's tensor inputs: a shape is a list of sizes, a list of tensors a list of shapes
    (``cat``'s); a scalar argument, recorded with no shape, counts none."""
    total = 0
    for shape in dims:
        if isinstance(shape, (list, tuple)) and shape and all(isinstance(size, int) for size in shape):
            total += prod(shape)
        elif isinstance(shape, (list, tuple)) and shape and all(isinstance(item, (list, tuple)) for item in shape):
            total += _elements(shape)
    return total
