"""The user's data loader: its settings and the measured time to produce a batch."""

from __future__ import annotations

import time
from typing import Any, Callable

from advisor.evidence import DataLoaderInfo


def describe_loader(loader: Any) -> DataLoaderInfo:
    dataset = getattr(loader, "dataset", None)
    try:
        length = len(dataset) if dataset is not None else None
    except TypeError:  # iterable datasets
        length = None
    return DataLoaderInfo(
        loader_class=type(loader).__name__,
        batch_size=getattr(loader, "batch_size", None),
        num_workers=int(getattr(loader, "num_workers", 0) or 0),
        pin_memory=bool(getattr(loader, "pin_memory", False)),
        persistent_workers=bool(getattr(loader, "persistent_workers", False)),
        prefetch_factor=getattr(loader, "prefetch_factor", None),
        drop_last=bool(getattr(loader, "drop_last", False)),
        dataset_class=type(dataset).__name__ if dataset is not None else "",
        dataset_len=length,
    )


def measure_loader(
    loader: Any,
    max_batches: int = 30,
    budget_s: float = 5.0,
    on_batch: Callable[[int], None] | None = None,
) -> DataLoaderInfo:
    """Time ``next()`` per batch over one pass (bounded); the first includes worker start-up."""
    info = describe_loader(loader)
    started = time.perf_counter()
    iterator = iter(loader)
    samples: list[float] = []
    while len(samples) < max_batches:
        begin = time.perf_counter_ns()
        try:
            next(iterator)
        except StopIteration:
            break
        samples.append((time.perf_counter_ns() - begin) / 1e6)
        if on_batch is not None:
            on_batch(len(samples))
        if time.perf_counter() - started >= budget_s and len(samples) >= 3:
            break
    del iterator  # stops loader workers now rather than at interpreter exit
    info.batches_measured = len(samples)
    if samples:
        info.first_batch_ms = samples[0]
        steady = sorted(samples[1:] or samples)
        info.batch_ms_median = steady[len(steady) // 2]
        info.batch_ms_samples = samples
    return info
