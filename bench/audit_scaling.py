"""How the audit's cost grows with the model: ``advisor audit --no-verify`` of samples/gpt_block.py built with 2, 8,
32 and 64 layers, and of a ResNet-50-sized CNN (bench/models/resnet50.py), against a bare script running the same
steps of the same model, optimizer and inputs, whole processes, alternating.

Run by hand (not by the tests), on a quiet machine. For each model: one audit that only warms the caches, then
``--repeats`` pairs (an audit, then a bare run of as many steps as that audit said it ran; see
bench/audit_overhead.py). Each process of a run is watched while it runs (every 20 ms, its ``VmHWM`` in
``/proc/PID/status``): the audit's parent (the ``advisor`` command) and its child (the supervised worker that runs
the model) are shown apart, with the bare script's own peak. The table gives the medians of wall time and of
each peak, the median of the pairs' ratios, and the audit's stage times from its report.

The fixed cost: what the audit adds to a bare run whatever the model (Python and torch started a second time in
the child, Dynamo's import and first capture, the profiler's start, the reports), in seconds: the excess (audit
minus bare) on a model too small to cost anything itself (one 8x8 linear layer), the first row.

    python bench/audit_scaling.py [--layers 2,8,32,64] [--no-cnn] [--repeats 3]   (--layers '' for the fixed cost alone)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from audit_overhead import BARE, audit_command, steps_and_stages
from whole_process import ROOT, compile_sources

GPT = """import importlib.util, torch
spec = importlib.util.spec_from_file_location("gpt_block", {path!r})
gpt_block = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpt_block)
get_inputs, get_optimizer, loss_fn = gpt_block.get_inputs, gpt_block.get_optimizer, gpt_block.loss_fn


def get_model():
    torch.manual_seed(0)
    return gpt_block.GPT(layers={layers})
"""
TINY = """import torch


def get_model():
    torch.manual_seed(0)
    return torch.nn.Linear(8, 8)


def get_inputs():
    return torch.randn(4, 8, generator=torch.Generator().manual_seed(1))


def get_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.1)


def loss_fn(output, inputs):
    return output.square().mean()
"""
POLL_S = 0.02


def _status_kb(pid: int, field: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as handle:
            return [int(child) for child in handle.read().split()]
    except OSError:
        return []


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def watched(command: list[str]) -> tuple[float, float, float]:
    """(wall seconds, the main process's peak RSS in MB, the largest descendant's peak RSS in MB) of ``command``,
    from a scratch folder (``python -m advisor`` there imports the installed advisor, not a checkout's)."""
    peaks: dict[int, int] = {}
    with tempfile.TemporaryDirectory() as scratch:
        began = time.perf_counter()
        process = subprocess.Popen(command, cwd=scratch, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        while process.poll() is None:
            pending, seen = [process.pid], set()
            while pending:
                pid = pending.pop()
                seen.add(pid)
                if (peak := _status_kb(pid, "VmHWM")) is not None:
                    peaks[pid] = max(peaks.get(pid, 0), peak)
                pending.extend(child for child in _children(pid) if child not in seen)
            time.sleep(POLL_S)
        seconds = time.perf_counter() - began
        error = process.stderr.read().decode(errors="replace")
    if process.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(command)} failed ({process.returncode}): {error[-2000:]}")
    main = peaks.pop(process.pid, 0)
    return seconds, main / 1024, max(peaks.values(), default=0) / 1024


def _model_files(scratch: str, layers: list[int], cnn: bool) -> list[tuple[str, str]]:
    tiny = os.path.join(scratch, "tiny.py")
    with open(tiny, "w", encoding="utf-8") as handle:
        handle.write(TINY)
    files = [("tiny (fixed)", tiny)]
    for count in layers:
        path = os.path.join(scratch, f"gpt_{count}_layers.py")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(GPT.format(path=os.path.join(ROOT, "samples", "gpt_block.py"), layers=count))
        files.append((f"gpt {count} layers", path))
    if cnn:
        files.append(("resnet50 cnn", os.path.join(ROOT, "bench", "models", "resnet50.py")))
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", default="2,8,32,64")
    parser.add_argument("--no-cnn", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    compile_sources()
    print(f"{'model':15} {'steps':>5} {'audit s':>8} {'bare s':>7} {'wall':>6} {'parent MB':>9} {'child MB':>8} "
          f"{'bare MB':>8} {'memory':>7}  audit stages (s)")
    fixed_s: float | None = None
    with tempfile.TemporaryDirectory() as scratch:
        for name, model in _model_files(scratch, [int(n) for n in args.layers.split(",") if n], not args.no_cnn):
            # a folder of its own per model: the step count and stages are read from the one report in it
            out, bare = os.path.join(scratch, name.replace(" ", "_")), os.path.join(scratch, "bare.py")
            watched(audit_command(model, out))  # warms the disk cache and the compiled sources for both
            audits, bares, stages, counts = [], [], [], []
            for _ in range(args.repeats):
                audits.append(watched(audit_command(model, out)))
                steps, stage_seconds = steps_and_stages(out)
                stages.append(stage_seconds)
                counts.append(steps)
                with open(bare, "w", encoding="utf-8") as handle:  # the steps this audit ran
                    handle.write(BARE.format(root=ROOT, model=model, steps=steps))
                bares.append(watched([sys.executable, bare]))
            audit_s, bare_s = statistics.median(a[0] for a in audits), statistics.median(b[0] for b in bares)
            parent_mb, child_mb = statistics.median(a[1] for a in audits), statistics.median(a[2] for a in audits)
            bare_mb = statistics.median(b[1] for b in bares)
            wall = statistics.median(a[0] / b[0] for a, b in zip(audits, bares))  # each pair ran its own count
            memory = statistics.median(max(a[1], a[2]) / b[1] for a, b in zip(audits, bares))
            breakdown = " ".join(f"{stage} {statistics.median(s[stage] for s in stages):.2f}" for stage in stages[0]
                                 if statistics.median(s[stage] for s in stages) >= 0.05)
            print(f"{name:15} {int(statistics.median(counts)):5d} {audit_s:8.2f} {bare_s:7.2f} {wall:5.2f}x "
                  f"{parent_mb:9.0f} {child_mb:8.0f} {bare_mb:8.0f} {memory:6.2f}x  {breakdown}", flush=True)
            if fixed_s is None:
                fixed_s = statistics.median(a[0] - b[0] for a, b in zip(audits, bares))
                print(f"{'':15} fixed cost: {fixed_s:.2f} s", flush=True)


if __name__ == "__main__":
    main()
