"""The data loader cannot keep up: batches are prepared in too few worker processes.

What it detects:
    A loader with ``num_workers=0`` (or too few workers) whose measured time per batch is a
    meaningful share of each iteration: at least ``min_share`` of (data wait + step), and at
    least ``min_batch_ms`` per batch in absolute terms (below that, worker processes cost
    more in inter-process transfer than they save). Also reports ``persistent_workers=False``
    when re-starting the workers each epoch costs at least ``min_startup_share`` of an epoch.

Why it matters:
    With ``num_workers=0`` every batch is loaded and transformed in the training process,
    between steps: the accelerator idles while Python decodes and augments. Worker processes
    prepare the next batches while the step runs, hiding the loading time entirely when there
    are enough of them.

How to fix:
    Set ``num_workers`` to the value given (enough to hide the measured batch time behind the
    step, capped by the cores the step itself leaves free) and ``persistent_workers=True``.
    When even that cannot hide it, make ``__getitem__`` cheaper: precompute or cache decoded
    samples, move augmentation to the GPU.

Example:
    Before::

        DataLoader(dataset, batch_size=32, shuffle=True)

    After::

        DataLoader(dataset, batch_size=32, shuffle=True, num_workers=4, persistent_workers=True)
"""

from __future__ import annotations

import math
from typing import Iterator

from advisor.evidence import SHARE_NOISE_FLOOR, DataLoaderInfo, Evidence, Margin
from advisor.patch.common_sites import at_loader_call
from advisor.rulekit.fixing import replace_target
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Severity, Threshold, Thresholds, rule

DOCS = ["https://pytorch.org/docs/stable/data.html#multi-process-data-loading",
        "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#enable-async-data-loading-and-augmentation"]


@rule(
    slug="dataloader-workers",
    code="ADV105",
    layer=Layer.APPLICATION,
    needs=("data",),
    severity=Severity.MEDIUM,
    high_at="high_share",
    thresholds={
        "min_share": Threshold(0.10, "share of each iteration spent waiting for data"),
        "min_batch_ms": Threshold(1.0, "time per batch below which workers do not pay off", "ms"),
        "high_share": Threshold(0.5, "share of each iteration waiting for data that makes it high"),
        "min_startup_share": Threshold(0.10, "worker start-up as a share of an epoch, for persistent_workers"),
        "min_steady_batches": Threshold(3, "batches after the first needed to judge the loader's pace", "count"),
    },
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    data, step_ms = ev.data, ev.step_ms
    if data is None or data.batch_ms_median is None or not step_ms:
        return
    yield from _too_few_workers(ev, data, step_ms, th)
    yield from _restarting_workers(data, step_ms, th)


def _too_few_workers(ev: Evidence, data: DataLoaderInfo, step_ms: float, th: Thresholds) -> Iterator[Finding]:
    batch_ms = data.batch_ms_median
    if data.batches_measured - 1 < th.min_steady_batches:
        return  # too few batches after start-up to know the loader's steady pace
    yield Margin(quantity="time per batch (ms)", value=round(batch_ms, 4), threshold=th.min_batch_ms,
                 noise=round(batch_ms * SHARE_NOISE_FLOOR, 4))  # reported when silent too
    if batch_ms < th.min_batch_ms:
        return  # cheap batches: workers would add IPC cost for nothing
    # With workers the measured time is the pool's throughput, overlapped with the step.
    # A wait measured in the user's own loop (advisor run) is already the exposed part.
    wait_ms = batch_ms if data.num_workers == 0 or data.measured_in_loop else max(0.0, batch_ms - step_ms)
    share = wait_ms / (wait_ms + step_ms)
    margin = ev.share_margin("data wait share of the iteration", share, th.min_share)
    yield margin  # how near it came: reported when the rule stays silent too
    if share < th.min_share:
        return
    per_worker_ms = batch_ms * max(data.num_workers, 1)
    needed = max(1, math.ceil(per_worker_ms / step_ms))
    free, why = _free_cores(ev)
    if data.num_workers and data.num_workers >= needed and data.num_workers >= free:
        # more workers cannot help: the ones there are enough for the pace, and already take every free core
        yield Clean(why=f"the loop waits for data, but its {data.num_workers} workers are more than the {needed} its "
                        f"pace needs and take every free core ({why}): they are short of CPU, not of number")
        return
    suggested = max(min(needed, free), data.num_workers + 1)
    enough = suggested >= needed
    message = (
        f"loading a batch takes {batch_ms:.3g} ms with num_workers={data.num_workers}, the step "
        f"{step_ms:.3g} ms: {share:.0%} of each iteration waits for data; "
        f"{needed} worker(s) would hide it, {why}: use num_workers={suggested}"
    )
    if not enough:
        workers = f"{suggested} worker{'s' if suggested != 1 else ''}"
        message += f" and make __getitem__ cheaper (with {workers} loading still sets the pace)"
    yield Finding(
        message=message,
        impact=share,
        margin=margin,
        evidence={
            "batch_ms": round(batch_ms, 4), "step_ms": round(step_ms, 4), "data_wait_share": round(share, 4),
            "num_workers": data.num_workers, "workers_needed": needed, "workers_suggested": suggested,
            "cores_free_for_workers": free, "batches_measured": data.batches_measured,
        },
        locations=data.places(cost="the cost: per-sample work runs here"),
        fix=Fix(
            summary=f"DataLoader(..., num_workers={suggested}, persistent_workers=True)"
                    + ("" if enough else "; precompute or cache the per-sample transforms"),
            before=f"DataLoader(dataset, batch_size={data.batch_size}, num_workers={data.num_workers})",
            after=f"DataLoader(dataset, batch_size={data.batch_size}, num_workers={suggested}, persistent_workers=True)",
            docs=DOCS,
        ),
    )


def _free_cores(ev: Evidence) -> tuple[int, str]:
    env = ev.env
    if env is None:
        return 1, "the core count is unknown"
    cores = env.cpu_cores_available or env.cpu_cores_logical
    if ev.on_cuda:  # the step's arithmetic is on the GPU; the main process needs one core
        return max(1, cores - 1), f"this machine has {cores} cores, one for the training process"
    threads = env.torch_threads
    return (max(1, cores - threads),
            f"this machine has {cores} cores and the step itself uses {threads} thread(s)")


def _restarting_workers(data: DataLoaderInfo, step_ms: float, th: Thresholds) -> Iterator[Finding]:
    if data.num_workers == 0 or data.persistent_workers or data.first_batch_ms is None or not data.batches_per_epoch:
        return
    startup_ms = max(0.0, data.first_batch_ms - data.batch_ms_median)
    epoch_ms = data.batches_per_epoch * max(data.batch_ms_median, step_ms) + startup_ms
    share = startup_ms / epoch_ms
    if share < th.min_startup_share:
        return
    yield Finding(
        severity=Severity.LOW,
        message=(f"starting {data.num_workers} loader workers takes {startup_ms:.3g} ms, {share:.0%} of a "
                 f"{data.batches_per_epoch}-batch epoch, and happens again every epoch: set persistent_workers=True"),
        impact=None,
        evidence={"startup_ms": round(startup_ms, 3), "epoch_ms": round(epoch_ms, 3), "startup_share": round(share, 4)},
        locations=data.places(),
        fix=Fix(summary="DataLoader(..., persistent_workers=True) keeps the workers between epochs",
                before=f"DataLoader(dataset, num_workers={data.num_workers})",
                after=f"DataLoader(dataset, num_workers={data.num_workers}, persistent_workers=True)", docs=DOCS),
    )


@check.fix(what="the same loader with more workers, kept between epochs")
def fix(target, finding):
    """Rebuild the user's DataLoader with the suggested num_workers and persistent workers."""
    return replace_target(target, loader_options={**target.loader_options, **_options(finding)})


def _options(finding):
    workers = finding.evidence.get("workers_suggested")
    return {**({"num_workers": int(workers)} if workers is not None else {}), "persistent_workers": True}


@check.patch(what="num_workers and persistent_workers at the DataLoader(...) call", through_loader=True)
def patch(files, finding):
    """The loader's keywords set where the audit saw it created."""
    return at_loader_call(files, finding, **_options(finding))
