"""More data-loader worker processes than the machine has cores for.

What it detects:
    A DataLoader whose ``num_workers`` exceeds ``max_workers_per_core`` times the cores this
    process may use (its CPU affinity, which is what a container grants).

Why it matters:
    Each worker is a full process holding a copy of the dataset object and ``prefetch_factor``
    batches. Beyond the core count they cannot run at the same time: they add memory (often
    the cause of out-of-memory kills in containers), start-up time every epoch, and context
    switches that slow the training process itself — without producing batches any faster.

How to fix:
    Size ``num_workers`` from the usable cores, ``min(wanted, len(os.sched_getaffinity(0)))``
    (fewer when the training process itself needs the cores), and add
    ``persistent_workers=True``.

Example:
    Before::

        DataLoader(dataset, batch_size=64, num_workers=32)

    After::

        DataLoader(dataset, batch_size=64, persistent_workers=True,
                   num_workers=min(8, len(os.sched_getaffinity(0))))
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence
from advisor.patch.common_sites import at_loader_call
from advisor.rulekit.fixing import replace_target
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Margin, Severity, Threshold, Thresholds, rule


@rule(
    slug="dataloader-too-many-workers",
    code="ADV131",
    layer=Layer.APPLICATION,
    needs=("data", "env"),
    severity=Severity.MEDIUM,
    thresholds={"max_workers_per_core": Threshold(1.0, "loader workers per usable core")},
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    data, env = ev.data, ev.env
    if data is None or env is None or not env.cpu_cores_available or not data.num_workers:
        yield Clean(why="the loader loads in the main process (num_workers=0)" if data is not None and
                    not data.num_workers else "the loader or the machine's cores were not recorded")
        return
    cores = env.cpu_cores_available
    yield Margin(quantity="loader workers per usable core", value=round(data.num_workers / cores, 4),
                 threshold=th.max_workers_per_core, noise=0.0)
    if data.num_workers <= th.max_workers_per_core * cores:
        return
    suggested = cores
    yield Finding(
        message=(f"the data loader starts {data.num_workers} worker processes for {cores} usable cores "
                 f"(machine: {env.cpu_cores_logical}): they cannot run at once, and each holds a dataset copy "
                 f"and {data.prefetch_factor or 2} prefetched batches"),
        evidence={"num_workers": data.num_workers, "cores_available": cores, "cores_logical": env.cpu_cores_logical,
                  "first_batch_ms": data.first_batch_ms, "batch_ms_median": data.batch_ms_median,
                  "suggested_workers": suggested},
        locations=data.places(cost="each worker holds a copy of this dataset"),
        fix=Fix(summary=f"num_workers={suggested} (no more than the usable cores), persistent_workers=True",
                before=f"DataLoader(dataset, num_workers={data.num_workers})",
                after="DataLoader(dataset, persistent_workers=True,\n"
                      "           num_workers=min(8, len(os.sched_getaffinity(0))))",
                docs=["https://pytorch.org/docs/stable/data.html#multi-process-data-loading"]),
    )


@check.fix(what="fewer loader workers")
def fix(target, finding):
    """The same loader with workers sized to the usable cores."""
    return replace_target(target, loader_options={**target.loader_options, **_options(finding)})


def _options(finding):
    return {"num_workers": finding.evidence["suggested_workers"], "persistent_workers": True}


@check.patch(what="num_workers sized to the usable cores at the DataLoader(...) call", through_loader=True)
def patch(files, finding):
    """The loader's keywords set where the audit saw it created."""
    return at_loader_call(files, finding, **_options(finding))
