"""Many ranks in bounded memory: each rank's trace reduced to what the rank-aware rules read.

A 64-rank folder of full traces would hold every event of every rank at once. Here only the
primary rank's trace is kept whole (every other rule reads it); the others are parsed in a pool of
worker processes, one trace at a time per worker, and each comes back as a ``RankTrace``: its
rank, its mean step, the offset of each collective's launch from its step's start and, in traces
advisor recorded, the host time between the script's torch calls (the straggler rule's inputs) —
a few hundred numbers per rank.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator

from advisor.opnames import COLLECTIVE_CALL_PREFIX, is_collective, is_collective_call
from advisor.trace.parse import Trace, parse_trace

if TYPE_CHECKING:
    from concurrent.futures import Executor

MAX_WORKERS = 4  # each holds one parsed trace at a time: more would raise the peak more than the speed


@dataclass(frozen=True)
class RankTrace:
    path: str
    distributed_info: dict = field(default_factory=dict)
    mean_step_us: float = 0.0
    collective_offsets: dict[tuple[int, int], float] = field(default_factory=dict)
    # (file, line of a torch call, line of the next one) -> µs per step between them with no torch call running
    host_gaps: dict[tuple[str, int, int], float] = field(default_factory=dict)

    @classmethod
    def of(cls, trace: Trace) -> RankTrace:
        return cls(path=trace.path, distributed_info=dict(trace.distributed_info),
                   mean_step_us=trace.mean_step_us() if trace.steps else 0.0, collective_offsets=launch_offsets(trace),
                   host_gaps=host_gaps(trace))

    @property
    def rank(self) -> int | None:
        return self.distributed_info.get("rank")


def launch_offsets(trace: Trace) -> dict[tuple[int, int], float]:
    """(step, k) -> µs from the step's start to the launch of its k-th collective: its GPU kernel's
    launch, or on CPU (gloo) the collective call itself."""
    per_step: dict[int, list[float]] = {}
    for kernel in trace.kernels:
        if kernel.step is None or not is_collective(kernel.name):
            continue
        launch = trace.launch_of(kernel)
        if launch is not None:
            per_step.setdefault(kernel.step, []).append(launch.ts - trace.steps[kernel.step].ts)
    if not per_step:
        for op in trace.ops:
            if op.step is not None and is_collective_call(op.name):
                per_step.setdefault(op.step, []).append(op.ts - trace.steps[op.step].ts)
    return {(step, k): offset for step, found in per_step.items() for k, offset in enumerate(sorted(found))}


def host_gaps(trace: Trace) -> dict[tuple[str, int, int], float]:
    """Per step, the host time between consecutive torch calls of the script (advisor's source
    annotations), by the pair of lines: Python work that runs no torch op (a sleep, a tokenizer,
    logging) shows only there."""
    if not trace.steps or not trace.calls:
        return {}
    totals: dict[tuple[str, int, int], float] = {}
    previous = None
    for call in sorted((c for c in trace.calls if c.step is not None), key=lambda c: (c.tid, c.ts)):
        end = previous.ts + previous.dur if previous is not None else 0.0
        if previous is not None and call.ts < end:
            continue  # a call inside the previous one (nested torch calls): no gap
        if (previous is not None and previous.tid == call.tid and previous.step == call.step
                and previous.file == call.file):
            key = (call.file, previous.line, call.line)
            totals[key] = totals.get(key, 0.0) + call.ts - end
        previous = call
    return {key: total / len(trace.steps) for key, total in totals.items()}


def summarize_file(path: str) -> RankTrace:
    return RankTrace.of(parse_trace(path, only_ops=(COLLECTIVE_CALL_PREFIX,)))  # the only ops a summary reads


def parse_ranks(files: list[str], workers: int | None = None,
                cluster: str | None = None) -> tuple[Trace, list[RankTrace]]:
    """The first file parsed whole (every rule reads it) and every file's summary, in order.

    The other files are summarised by a pool, started first so that it works while this process parses the first
    file: worker processes here (on two cores, two ranks take about the time of one), or with ``cluster`` (a Dask
    scheduler's address, see cluster.py) the cluster's workers.
    """
    others = files[1:]
    cores = os.cpu_count() or 1
    workers = min(workers or cores, MAX_WORKERS, len(others))
    if not others or cluster is None and (cores == 1 or workers < 1):
        primary = parse_trace(files[0])
        return primary, [RankTrace.of(primary), *map(summarize_file, others)] if others else []
    with _pool(workers, cluster) as pool:
        summaries = pool.map(summarize_file, others)
        primary = parse_trace(files[0])
        return primary, [RankTrace.of(primary), *summaries]


@contextlib.contextmanager
def _pool(workers: int, cluster: str | None) -> Iterator[Executor]:
    if cluster is not None:
        from advisor.trace.cluster import cluster_executor

        with cluster_executor(cluster) as executor:
            yield executor
        return
    from concurrent.futures import ProcessPoolExecutor  # 13 ms of imports a single trace does not need

    pool = ProcessPoolExecutor(max_workers=workers)
    try:
        yield pool
    finally:  # a broken trace ends the run: the ranks not yet started are not parsed for nothing
        pool.shutdown(wait=True, cancel_futures=True)
