"""The user's data loader: its settings and the measured time to produce a batch."""

from __future__ import annotations

import inspect
import statistics
import time
from typing import Any, Callable

import torch
from torch.utils._pytree import tree_flatten

from advisor.evidence import DataLoaderInfo
from advisor.sources import is_library_path
from advisor.workload.loader_site import site_of


def describe_loader(loader: Any, fallback_source: tuple[str, int] = ("", 0)) -> DataLoaderInfo:
    dataset = getattr(loader, "dataset", None)
    try:
        length = len(dataset) if dataset is not None else None
    except TypeError:  # iterable datasets
        length = None
    try:
        batches = len(loader)
    except TypeError:
        batches = None
    source_file, source_line = _user_source(type(dataset), "__getitem__") or fallback_source
    created_file, created_line = site_of(loader) or ("", 0)
    return DataLoaderInfo(
        batches_per_epoch=batches,
        source_file=source_file,
        source_line=source_line,
        created_file=created_file,
        created_line=created_line,
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


MIN_BATCHES = 4  # the first (with worker start-up), then three at the loader's steady pace, however slow


def measure_loader(
    loader: Any,
    max_batches: int = 30,
    budget_s: float = 5.0,
    on_batch: Callable[[int], None] | None = None,
    fallback_source: tuple[str, int] = ("", 0),
) -> DataLoaderInfo:
    """Time ``next()`` per batch over one pass, for ``budget_s`` but at least ``MIN_BATCHES`` (a busy machine
    makes each batch slower, not the pace less worth knowing); the first includes worker start-up."""
    info = describe_loader(loader, fallback_source)
    started = time.perf_counter()
    iterator = iter(loader)
    samples: list[float] = []
    while len(samples) < max_batches:
        begin = time.perf_counter_ns()
        try:
            batch = next(iterator)
        except StopIteration:
            break
        samples.append((time.perf_counter_ns() - begin) / 1e6)
        if info.batch_bytes is None:
            info.batch_bytes = _tensor_bytes(batch)
        if on_batch is not None:
            on_batch(len(samples))
        if time.perf_counter() - started >= budget_s and len(samples) >= MIN_BATCHES:
            break
    del iterator  # stops loader workers now rather than at interpreter exit
    info.batches_measured = len(samples)
    if samples:
        info.first_batch_ms = samples[0]
        info.batch_ms_median = statistics.median(samples[1:] or samples)
        info.batch_ms_samples = samples
    return info


def _tensor_bytes(batch: Any) -> int:
    leaves, _ = tree_flatten(batch)
    return sum(t.numel() * t.element_size() for t in leaves if isinstance(t, torch.Tensor))


def _user_source(cls: type, method: str) -> tuple[str, int] | None:
    """Where ``cls.method`` is defined, when that is the user's code rather than PyTorch's."""
    function = getattr(cls, method, None)
    try:
        file = inspect.getsourcefile(function)
        line = inspect.getsourcelines(function)[1]
    except (TypeError, OSError):
        return None
    if not file or is_library_path(file):
        return None
    return file, line
