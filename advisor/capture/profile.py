"""Profile a few steps with torch.profiler and export the Kineto trace (``.json.gz``).

Warm-up steps run first, outside the profiler, and two more inside it. Each profiled step is a ``ProfilerStep#N``
range; while it runs, SourceAnnotator marks each torch call with the user's file and line.
The trace evidence is built by parsing the exported file, so recorded traces from elsewhere
go through the same code.
"""

from __future__ import annotations

import gzip
import os
import shutil
import tempfile
from typing import Any, Callable

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from advisor.capture.annotate import SourceAnnotator
from advisor.files.intercept import suspended
from advisor.trace.parse import ANNOTATED_MARKER
from advisor.workload.heap import HeapGrowthGuard


def record_trace(
    step: Callable[[], Any],
    device: torch.device,
    path: str,
    steps: int = 3,
    warmup: int = 2,
    annotate: bool = True,
    unlabelled: int = 2,
) -> None:
    for _ in range(warmup):
        step()
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    # Python frames only where no annotation names the lines: the parser reads them in no annotated trace, and
    # beside the annotator they made kernel_storm's 5 profiled steps take 13 s instead of 1 (trace 15x larger)
    heap = HeapGrowthGuard()
    with profile(activities=activities, record_shapes=True, with_stack=not annotate) as prof:
        # The profiler slows its first steps (up to 15x seen on short steps: a fixed cost of its own); they stay
        # unlabelled, so they belong to no ProfilerStep and enter no per-step figure.
        for _ in range(unlabelled):
            step()
            heap.after_step()  # between steps, in no step's range, where the step grew the process: workload/heap.py
        if annotate:
            with record_function(ANNOTATED_MARKER):
                pass
        for index in range(steps):
            with record_function(f"ProfilerStep#{index}"):
                if annotate:
                    with SourceAnnotator():
                        step()
                else:
                    step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            heap.after_step()
    export_trace(prof, path)


# torch.profiler gzips a .gz export line by line at level 9: 0.7 s of kernel_storm's 0.75 s export (a 7.5 MB
# trace); one pass at level 3 takes 0.03 s for a file 1.6x larger, which inflates as fast
GZIP_LEVEL = 3


def export_trace(prof: profile, path: str) -> None:
    """Write the profile's Kineto trace to ``path`` (a ``.json.gz``): exported plain, then compressed once; the
    recorded events are let go of once written."""
    with suspended():  # advisor's own files, not the user's writes
        handle, plain = tempfile.mkstemp(suffix=".json", dir=os.path.dirname(os.path.abspath(path)))
        os.close(handle)
        try:
            prof.export_chrome_trace(plain)
            with open(plain, "rb") as source, gzip.open(path, "wb", compresslevel=GZIP_LEVEL) as target:
                shutil.copyfileobj(source, target, 1 << 20)
        finally:
            os.remove(plain)
            # torch's profile object is in a reference cycle (its action map holds its own bound methods): it goes
            # only at the next full collection, and the events with it, held meanwhile through the audit's next
            # stages or the user's script (90 MB on an 8-layer GPT, 350 MB on a 32-layer one). They go now.
            prof.profiler = None
