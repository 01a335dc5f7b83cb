"""What ``advisor audit --no-verify`` costs against a bare run of the same steps, whole processes, alternating.

Run by hand (not by the tests), on a quiet machine. After one audit that only warms the caches,
``--repeats`` pairs run alternately: an audit, which says how many steps it ran (the timing stage's warm-up
and timed steps, the trace stage's two warm-ups, two unlabelled and its profiled steps, one step each for
calls and FLOPs), then a bare script generated for the sample that runs as many steps of the same model,
optimizer and inputs: the model file's protocol, loaded and stepped by ``advisor.workload`` as the audit's
child does, and nothing else (no profiler, no graph, no reports). Each pair has its own count, since the
timing stage takes more steps when their median is slow to settle. The table prints the medians, the median
of the pairs' ratios (issue 26's goal: at most 1.5x) and the audit's stage times from its report.

    python bench/audit_overhead.py [--samples gpt_block,kernel_storm] [--repeats 3]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
import tempfile

from whole_process import ROOT, compile_sources, measured

sys.path.insert(0, ROOT)
from advisor.capture.stages import profiled_steps  # noqa: E402

BARE = """import sys, time
sys.path.insert(0, {root!r})
import torch
from advisor.workload.target import load_target
from advisor.workload.step import make_step, synchronize
target = load_target({model!r})
step = make_step(target, *target.fresh())
for _ in range({steps}):
    step()
synchronize(target.device)
"""
DEFAULT_SAMPLES = "gpt_block,kernel_storm,missing_amp,non_contiguous,resnet_style"
# Steps the audit runs beside its timed and profiled ones: the trace stage's warm-up and its unlabelled profiled
# steps (capture/stages.py: fewer for a long step, told by the profiled steps' count); the timing stage's first
# step (run alone, so that a failing step is reported at the user's line) and one each for the calls and FLOPs
# stages (on the copy the timing warmed up)
OTHER_STAGE_STEPS = 3


def trace_extra_steps(steps_profiled: int, step_ms: float | None) -> int:
    """The trace stage's warm-up and its unlabelled steps, as capture/stages.py chose them for the timed step."""
    return 1 + profiled_steps(step_ms)[1] if steps_profiled else 0


def audit_command(model: str, out: str) -> list[str]:
    return [sys.executable, "-m", "advisor", "audit", model, "--no-verify", "--format", "json", "--out", out]


def steps_and_stages(out: str) -> tuple[int, dict[str, float]]:
    report = json.load(open(glob.glob(os.path.join(out, "*.json"))[0]))
    timing, trace = report.get("timing") or {}, report.get("trace") or {}
    windows = max(1, len(timing.get("windows_ms") or []))  # each timing window warms its own copy up
    steps = (timing.get("warmup_steps", 0) * windows + len(timing.get("samples_ms", [])) + timing.get("settled_after", 0)
             + trace.get("steps_profiled", 0) + trace_extra_steps(trace.get("steps_profiled", 0), timing.get("median_ms"))
             + OTHER_STAGE_STEPS)
    return steps, {stage["stage"]: stage["seconds"] for stage in report["stages"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", default=DEFAULT_SAMPLES)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    compile_sources()
    print(f"{'sample':16} {'steps':>5} {'audit s':>8} {'bare s':>7} {'ratio':>6}  audit stages (s)")
    for sample in args.samples.split(","):
        model = os.path.join(ROOT, "samples", f"{sample}.py")
        with tempfile.TemporaryDirectory() as scratch:
            out = os.path.join(scratch, "reports")
            measured(audit_command(model, out))  # warms the disk cache and the compiled sources for both
            bare = os.path.join(scratch, "bare.py")
            audits, bares, stages, counts = [], [], [], []
            for _ in range(args.repeats):
                audits.append(measured(audit_command(model, out))[0])
                steps, stage_seconds = steps_and_stages(out)
                stages.append(stage_seconds)
                counts.append(steps)
                with open(bare, "w") as handle:  # the steps this audit ran: the timing takes more on a noisy step
                    handle.write(BARE.format(root=ROOT, model=model, steps=steps))
                bares.append(measured([sys.executable, bare])[0])
        steps = int(statistics.median(counts))
        audit_s, bare_s = statistics.median(audits), statistics.median(bares)
        ratio = statistics.median(audit / bare for audit, bare in zip(audits, bares))  # each pair ran its own count
        breakdown = " ".join(f"{name} {statistics.median(s[name] for s in stages):.2f}" for name in stages[0]
                             if statistics.median(s[name] for s in stages) >= 0.05)
        print(f"{sample:16} {steps:5d} {audit_s:8.2f} {bare_s:7.2f} {ratio:5.2f}x  {breakdown}")


if __name__ == "__main__":
    main()
