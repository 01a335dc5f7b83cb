"""What ``advisor analyze`` gathers from recorded Kineto traces: nothing is run, the traces are the evidence.

A folder stands for one run, a trace per rank (the files in name order); the first rank's trace is read whole,
as every rule reads it, the others as summaries. A trace that cannot be read is the report's one error.
"""

from __future__ import annotations

import os

from advisor.errors import StageError
from advisor.evidence import Environment, Evidence, FlopCount, TargetInfo
from advisor.gathered import Gathered
from advisor.trace.parse import Trace, TraceFormatError
from advisor.trace.ranks import RankTrace, parse_ranks

TRACE_SUFFIXES = (".json", ".json.gz")


def trace_files(paths: tuple[str, ...]) -> list[str]:
    """Files as given; folders expand to their traces (one per rank), in name order."""
    files = []
    for path in paths:
        if os.path.isdir(path):
            found = sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(TRACE_SUFFIXES))
            if not found:
                raise TraceFormatError(f"{path}: a folder with no .json or .json.gz trace in it")
            files.extend(found)
        elif os.path.isfile(path):
            files.append(path)
        else:
            raise TraceFormatError(f"{path}: no such file or folder")
    return files


def gathered_traces(paths: tuple[str, ...], cluster: str | None = None) -> tuple[Gathered, list[str]]:
    """The traces' evidence and the files read; a trace that cannot be read gives nothing to judge, its error
    named, with the files as far as they were found. ``cluster``: the other ranks summarised on a Dask cluster
    (trace/cluster.py), whose failure to run them is raised (ClusterError)."""
    files: list[str] = []
    try:
        files = trace_files(paths)
        primary, ranks = parse_ranks(files, cluster=cluster)  # the first whole: every rule reads it; the other ranks as summaries
    except TraceFormatError as broken:
        target = TargetInfo(model_file=str(broken).split(":")[0], mode="recorded")
        return Gathered(evidence=Evidence(target=target), judge=False,
                        errors=[StageError(stage="parse", kind="user-code", message=str(broken))]), \
            files or list(paths)
    return Gathered(evidence=evidence_from_traces(primary, ranks)), files


def evidence_from_traces(first: Trace, ranks: list[RankTrace] | tuple = ()) -> Evidence:
    rank = first.distributed_info.get("rank")
    target = TargetInfo(
        model_file=first.path, mode="recorded", device="cuda" if first.has_gpu else "cpu",
        model_class=f"recorded trace{f' (rank {rank} of {len(ranks)})' if len(ranks) > 1 else ''}",
    )
    env = Environment()
    if first.device_properties:
        device = first.device_properties[0]
        env.device_name = str(device.get("name", ""))
        if "computeMajor" in device:
            env.gpu_capability = (int(device["computeMajor"]), int(device.get("computeMinor", 0)))
        env.gpu_count = len(first.device_properties)
    return Evidence(target=target, env=env, trace=first, ranks=list(ranks), flops=FlopCount.of_trace(first))
