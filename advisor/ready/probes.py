"""The readiness stages of the supervised child: each measures one thing on a fresh copy of the model.

``ready-cold`` runs first, so its first call is the process's first call of the model. Each
stage returns its evidence as JSON (see ``evidence.py``); the checks are decided in the parent.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any, Callable

from advisor.sandbox.registry import StagePlan, stage

# Timed stages come before the one that compiles with Inductor: its compile workers keep cores busy for a
# while after (measured: every eager call of a small MLP at 7 ms instead of 0.03 ms on 2 cores).
READY = StagePlan(modules=("advisor.capture.stages", "advisor.ready.probes"), stages=(
    "load", "env", "peaks", "ready-cold", "ready-modes", "ready-determinism", "ready-latency", "ready-precision",
    "ready-export", "ready-compile", "ready-recompiles"))
WARM_CALLS = 10


def _fresh(state: dict) -> tuple[Any, Any, Callable[[int], Any]]:
    """(a copy of the model on the device, its inputs, inputs of a batch size), all on the device."""
    from torch.utils._pytree import tree_map

    from advisor.ready.batches import batch_maker

    target = state["target"]
    model, feed, _ = target.fresh()
    make = batch_maker(target)
    device = target.device
    return model, feed.inputs, lambda size: tree_map(lambda v: v.to(device) if hasattr(v, "to") else v, make(size))


def _user(state: dict, what: str, run: Callable[[], Any]) -> Any:
    from advisor.workload.target import call_user

    return call_user("ready", state["target"].path, what, run)


@stage("ready-cold")
def _cold(state: dict, progress: Callable[[str], None]) -> str:
    import torch

    from advisor.ready.measured import ColdStartEvidence
    from advisor.workload.target import call_model
    from advisor.workload.timing import timer_for

    model, inputs, _ = _fresh(state)
    timer = timer_for(state["target"].device)
    with torch.inference_mode():
        first = _user(state, "the model's first call", lambda: timer(lambda: call_model(model, inputs)))
        warm = [timer(lambda: call_model(model, inputs)) for _ in range(WARM_CALLS)]
    return ColdStartEvidence(first_call_ms=round(first, 4), warm_ms=round(statistics.median(warm), 4)).model_dump_json()


@stage("ready-modes")
def _modes(state: dict, progress: Callable[[str], None]) -> str:
    from advisor.ready.modes import measure_modes

    model, inputs, _ = _fresh(state)
    target = state["target"]
    return _user(state, "the model", lambda: measure_modes(model, inputs, target.device, target.path)).model_dump_json()


@stage("ready-export")
def _export(state: dict, progress: Callable[[str], None]) -> str:
    from advisor.ready.exporting import measure_export

    model, inputs, _ = _fresh(state)
    return measure_export(model, inputs, state["target"].path).model_dump_json()


@stage("ready-compile")
def _compile(state: dict, progress: Callable[[str], None]) -> str:
    from advisor.ready.compiling import measure_compile

    model, inputs, _ = _fresh(state)
    return measure_compile(model, inputs).model_dump_json()


@stage("ready-recompiles")
def _recompiles(state: dict, progress: Callable[[str], None]) -> str:
    from advisor.ready.compiling import measure_recompiles

    model, _, batch_of = _fresh(state)
    sizes = state["spec"].batch_sizes
    return measure_recompiles(model, batch_of, sizes, state["target"].path).model_dump_json()


@stage("ready-determinism")
def _determinism(state: dict, progress: Callable[[str], None]) -> str:
    from advisor.ready.determinism import measure_determinism

    model, inputs, _ = _fresh(state)
    return _user(state, "the model", lambda: measure_determinism(model, inputs)).model_dump_json()


@stage("ready-latency")
def _latency(state: dict, progress: Callable[[str], None]) -> str:
    from advisor.ready.latency import measure_latency, memory_budget

    model, _, batch_of = _fresh(state)
    target, spec = state["target"], state["spec"]  # a ReadySpec
    began = time.monotonic()
    rows = measure_latency(model, batch_of, spec.batch_sizes, target.device, target.path,
                           seconds_per_size=spec.seconds_per_size)
    progress(f"{len(rows)} batch sizes in {time.monotonic() - began:.1f} s")
    return json.dumps({"rows": [json.loads(row.model_dump_json()) for row in rows],
                       "memory": json.loads(memory_budget(target.device).model_dump_json())})


@stage("ready-precision")
def _precision(state: dict, progress: Callable[[str], None]) -> str:
    from advisor.ready.precision import measure_precision

    model, inputs, _ = _fresh(state)
    target = state["target"]
    return measure_precision(model, inputs, target.device, state["spec"].precision,
                             target.path).model_dump_json()
