"""nn.DataParallel instead of DistributedDataParallel.

What it detects:
    An ``nn.DataParallel`` module in the model (the model itself or any submodule).

Why it matters:
    DataParallel runs every GPU from one Python process: each step it scatters the batch,
    replicates the whole model onto every GPU, gathers the outputs on GPU 0, and its threads
    contend for the GIL. GPU 0 also holds all outputs and the loss. PyTorch recommends
    DistributedDataParallel, one process per GPU with gradient all-reduce overlapped with the
    backward pass, even on a single machine; it is faster on any count of GPUs. On a single
    device DataParallel does nothing but add its wrapper.

How to fix:
    Launch one process per GPU with ``torchrun`` and wrap with ``DistributedDataParallel``.

Example:
    Before::

        model = nn.DataParallel(model).cuda()

    After::

        # torchrun --nproc_per_node=NUM_GPUS train.py
        dist.init_process_group("nccl")
        model = DistributedDataParallel(model.to(local_rank), device_ids=[local_rank])
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Severity, Thresholds, rule

WRAPPERS = ("DataParallel",)


@rule(slug="dataparallel", code="ADV132", layer=Layer.APPLICATION, severity=Severity.MEDIUM)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    count = sum(ev.target.module_types.get(name, 0) for name in WRAPPERS)
    if not count:
        yield Clean(why="the model holds no nn.DataParallel wrapper")
        return
    gpus = ev.env.gpu_count if ev.env is not None else 0
    multi = ev.on_cuda and gpus > 1
    yield Finding(
        severity=Severity.HIGH if multi else Severity.LOW,
        message=(f"the model uses nn.DataParallel ({count} wrapper(s))"
                 + (f" across {gpus} GPUs: it replicates the model and gathers outputs on GPU 0 every step, "
                    "from one Python process" if multi else
                    f"; this audit ran on {ev.target.device} (with {gpus} GPUs), where it only adds its wrapper, and "
                    "on several GPUs it replicates the model and gathers on GPU 0 every step")),
        evidence={"data_parallel_wrappers": count, "gpu_count": gpus, "device": ev.target.device},
        fix=Fix(summary="use DistributedDataParallel with one process per GPU (torchrun)",
                docs=["https://pytorch.org/docs/stable/notes/cuda.html#use-nn-parallel-distributeddataparallel-"
                      "instead-of-multiprocessing-or-nn-dataparallel",
                      "https://pytorch.org/tutorials/intermediate/ddp_tutorial.html"]),
    )


check.advice_only("DistributedDataParallel needs one process per GPU and a process group; "
                  "a single audited process cannot measure the change")
