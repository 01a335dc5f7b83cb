"""A rank that reaches its collectives late, making every other rank wait.

What it detects:
    Across the per-rank traces of one run (``advisor analyze FOLDER``, or the ranks of
    ``advisor run -- torchrun``), the launch of each collective kernel (on CPU, each collective
    call) measured from the start of its own rank's profiled step (so the ranks' clocks need
    not agree), the k-th collective of step s compared across ranks. A rank whose
    median lateness against the other ranks is at least ``min_late_ms`` and ``min_late_share``
    of the step is a straggler. What it is slow in comes from the ranks' own records (data
    wait, work outside communication); in traces advisor recorded (``advisor run``), the host
    time between two of the script's torch calls that the straggler spends and the others do
    not (at least half its lateness) pins the place: the lines between those calls.

Why it matters:
    A collective finishes only when every rank has joined it: one slow rank (more data, a
    slower GPU, a noisy neighbour, an extra sync) sets the pace for all of them, and its delay
    shows up in the others' traces as time inside NCCL kernels.

How to fix:
    Find what the straggler does differently before the collective: uneven batches or
    sequence lengths (balance or bucket them), extra host work or syncs on that rank (logging
    and checkpoints only on rank 0, off the critical path), or a slower device or link.

Example:
    Before::

        if rank == 0:
            log_metrics(loss.item())          # rank 0 syncs and logs inside the step

    After::

        if rank == 0 and step % 100 == 0:
            log_metrics(loss.item())
"""

from __future__ import annotations

import os
from typing import Iterator

from advisor.evidence import Evidence, Margin
from advisor.rulekit.rule import Finding, Fix, Layer, Location, Severity, Threshold, Thresholds, rule
from advisor.stats import fmean, median, median_uncertainty
from advisor.trace.ranks import RankTrace


@rule(
    slug="straggler",
    code="ADV112",
    layer=Layer.APPLICATION,
    needs=("ranks",),
    severity=Severity.HIGH,
    thresholds={
        "min_late_ms": Threshold(1.0, "median lateness of a rank's collective launches", "ms"),
        "min_late_share": Threshold(0.02, "that lateness as a share of the step"),
        "data_wait_share": Threshold(0.1, "extra data wait, as a share of its step, that makes the slow rank slow in data"),
        "busy_share": Threshold(0.02, "extra work outside communication, as a share of its step, that makes it slow "
                                      "in its own work"),
        "place_share": Threshold(0.5, "share of its lateness the host time between two of its torch calls must "
                                      "explain to be named as the place"),
    },
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding | Margin]:
    if len(ev.ranks) < 2:
        return
    offsets = [rank.collective_offsets for rank in ev.ranks]
    if not all(offsets):
        return
    keys = set.intersection(*(set(o) for o in offsets))
    if not keys:
        return
    gaps = []  # per rank, per collective: its offset less the median offset of the other ranks
    for rank, mine in enumerate(offsets):
        gaps.append([mine[k] - median(o[k] for j, o in enumerate(offsets) if j != rank) for k in keys])
    lateness = [median(rank_gaps) for rank_gaps in gaps]
    step_us = fmean(rank.mean_step_us for rank in ev.ranks)
    worst = max(range(len(lateness)), key=lambda r: lateness[r])
    late_us = lateness[worst]
    bar_us = max(th.min_late_ms * 1000, th.min_late_share * step_us)
    # reported when silent too: a lateness the collectives' spread cannot tell from the bar is borderline, and
    # a silent verdict on a contended machine is marked unreliable
    yield Margin(quantity="the latest rank's median lateness at its collectives (ms)", value=round(late_us / 1000, 4),
                 threshold=round(bar_us / 1000, 4), noise=round(median_uncertainty(gaps[worst]) / 1000, 4))
    if late_us < bar_us:
        return
    name = _rank_name(ev.ranks[worst], worst)
    rank = ev.ranks[worst].rank if ev.ranks[worst].rank is not None else worst
    place = _slow_place(ev.ranks[worst], [r for j, r in enumerate(ev.ranks) if j != worst], late_us, th)
    yield Finding(
        message=(f"{name} launches its collectives {late_us / 1000:.3g} ms later than the other ranks (median over "
                 f"{len(keys)} collectives), {late_us / step_us:.0%} of a step that every other rank spends waiting"
                 + _slow_in(ev, rank, th) + (f"; {place.note}" if place else "")),
        impact=late_us / step_us,
        evidence={"straggler": name, "late_ms": round(late_us / 1000, 4), "ranks": len(ev.ranks),
                  "collectives_compared": len(keys),
                  "lateness_ms_by_rank": [round(x / 1000, 4) for x in lateness]},
        locations=[place] if place else [],
        fix=Fix(summary=f"look at what {name} does before its collectives: uneven inputs, extra host work or syncs, "
                        "a slower device or link",
                docs=["https://pytorch.org/docs/stable/notes/ddp.html"]),
    )


def _slow_in(ev: Evidence, rank: int, th: Thresholds) -> str:
    """What the slow rank spends more time on than the others, from the ranks' own step records."""
    mine = next((r for r in ev.rank_summaries if r.rank == rank), None)
    others = [r for r in ev.rank_summaries if r.rank != rank]
    if mine is None or not others:
        return ""
    parts = []
    wait = median(r.data_wait_ms for r in others)
    if mine.data_wait_ms - wait > th.data_wait_share * mine.step_ms:
        parts.append(f"waiting for data ({mine.data_wait_ms:.3g} ms per step against {wait:.3g} ms)")
    if mine.comm_ms is not None and all(r.comm_ms is not None for r in others):
        busy = mine.step_ms - mine.comm_ms
        usual = median(r.step_ms - r.comm_ms for r in others)
        if busy - usual > th.busy_share * mine.step_ms:
            parts.append(f"work outside communication ({busy:.3g} ms per step against {usual:.3g} ms on the others: "
                         "compute, host syncs or per-batch work only it does)")
    return f"; it is slow in {' and '.join(parts)}" if parts else ""


def _slow_place(slow: RankTrace, others: list[RankTrace], late_us: float, th: Thresholds) -> Location | None:
    """The lines whose host time (between two torch calls) the slow rank spends and the others do
    not, when that extra time is at least half its lateness."""
    if not slow.host_gaps or not all(r.host_gaps for r in others):
        return None
    extra = {key: mine - median(r.host_gaps.get(key, 0.0) for r in others)
             for key, mine in slow.host_gaps.items()}
    key = max(extra, key=extra.get)
    if extra[key] < th.place_share * late_us:
        return None
    file, before, after = key
    name, per_step = os.path.basename(file), f"{extra[key] / 1000:.3g} ms per step more than the other ranks"
    if after > before + 1:
        lines = f"line {before + 1}" if after == before + 2 else f"lines {before + 1}-{after - 1}"
        return Location.at(file, before + 1, note=f"it spends {per_step} in {lines} of {name}, "
                                                   f"between the torch calls of lines {before} and {after}")
    if after > before:  # the two calls are on adjacent lines: the time is spent on the later one, before its call
        return Location.at(file, after, note=f"it spends {per_step} on line {after} of {name}, before its torch call")
    return Location.at(file, before, note=f"it spends {per_step} after the torch call of line {before} of {name}, "
                                          f"before the one of line {after} (the next iteration)")


def _rank_name(trace: RankTrace, position: int) -> str:
    return f"rank {trace.rank}" if trace.rank is not None else f"trace {position} ({trace.path})"
