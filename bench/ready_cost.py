"""What ``advisor ready`` costs against the bare cost of the same measurements.

For each sample: the wall time of ``advisor ready`` (a whole process: import, the supervised child,
every stage, the reports) against one plain Python process doing the same work by hand — export
non-strict and strict, Dynamo's explain, one compiled model called at each batch size, two calls
for determinism, the same number of timed calls per batch size as advisor took, one bf16 call.
The ratio is advisor's overhead; the bare time is what any tool must spend.

    python bench/ready_cost.py [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = ["deployable.py", "size_branch.py"]
SIZES = [1, 8, 32]

BARE = r'''
import importlib.util, sys, time, torch, torch._dynamo as dynamo
spec = importlib.util.spec_from_file_location("m", sys.argv[1]); m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
model, x = m.get_model(), m.get_inputs()
calls = [int(n) for n in sys.argv[2].split(",")]
def batch(n):
    return torch.cat([x] * (n // x.shape[0] + 1))[:n]
torch.export.export(model, (x,), strict=False); torch.export.export(model, (x,), strict=True)
dynamo.explain(model)(x); dynamo.reset()
compiled = torch.compile(model)
with torch.no_grad():
    for n in {sizes}: compiled(batch(n))
with torch.inference_mode():
    model(x); model(x)
    for n, count in zip({sizes}, calls):
        b = batch(n)
        for _ in range(5 + count):
            t = time.perf_counter_ns(); model(b); time.perf_counter_ns() - t
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(x)
'''.replace("{sizes}", repr(SIZES))


def timed(command: list[str]) -> float:
    began = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    print(f"{'sample':<18} {'advisor ready':>14} {'bare':>8} {'ratio':>7}")
    for name in SAMPLES:
        path = os.path.join(ROOT, "samples", "ready", name)
        with tempfile.TemporaryDirectory() as out:
            command = [sys.executable, "-m", "advisor", "ready", path, "--quiet", "--format", "json", "--out", out,
                       "--batch-sizes", ",".join(map(str, SIZES))]
            ready = statistics.median(timed(command) for _ in range(args.repeats))
            with open(os.path.join(out, name.replace(".py", ".json")), encoding="utf-8") as handle:
                rows = json.load(handle)["readiness"]["latency"]
        calls = ",".join(str(row["samples"]) for row in rows)
        bare = statistics.median(timed([sys.executable, "-c", BARE, path, calls]) for _ in range(args.repeats))
        print(f"{name:<18} {ready:>13.2f}s {bare:>7.2f}s {ready / bare:>7.2f}")


if __name__ == "__main__":
    main()
