"""Many ranks made from one real trace: copies of it, each its own rank of the world, the last one launching its
kernels ``LATE_US`` late (a straggler). For the tests of a folder of ranks and the bench of their scaling."""

from __future__ import annotations

import gzip
import json
import os

LATE_US = 20_000  # the straggler's delay: 9% of the 222 ms step of HTA's nccl_data trace


def make_ranks(folder: str, count: int, base: str) -> None:
    """``count`` ranks of ``base`` (a Kineto trace, .json.gz) as ``rank000.json.gz``... in ``folder``."""
    with gzip.open(base, "rt", encoding="utf-8") as handle:
        trace = json.load(handle)
    for rank in range(count):
        copy = dict(trace)
        copy["distributedInfo"] = {**trace.get("distributedInfo", {}), "rank": rank, "world_size": count}
        if rank == count - 1:
            copy["traceEvents"] = [_late(event) for event in trace["traceEvents"]]
        with gzip.open(os.path.join(folder, f"rank{rank:03d}.json.gz"), "wt", encoding="utf-8") as handle:
            json.dump(copy, handle)


def _late(event: dict) -> dict:
    if event.get("cat") in ("cuda_runtime", "cuda_driver") and "Launch" in str(event.get("name", "")):
        return {**event, "ts": event["ts"] + LATE_US}
    return event
