"""How close is advisor's verified speedup to an independent measurement of the recommended code?

For each sample, this script (run by hand, not by the tests) runs a real audit with verification
(each fix measured in its own fresh child process, as ``advisor audit`` does), then measures the
baseline and the recommended code with torch.utils.benchmark (blocked_autorange, same thread
count) in a fresh process of its own, and prints both speedups and their ratio. The recommended
code is the fix itself where the fix is what the report recommends (autocast, channels_last,
torch.compile); where advisor verifies through a graph rewrite (manual-attention) it is the
hand-written code of bench/recommended.py on the same weights. A ratio near 1.00 means advisor
measured what it recommends, and its interleaved A/B number agrees with a standard harness.
Both sides are measured in fresh processes: a process's allocator adapts to what ran before it
(manual_attention's baseline step: 7 ms fresh, 4.2 ms after another fix had been measured).
``manual_attention_train`` (bench/models) is the GPT causal block as a training step, dropout on.

    python bench/verify_accuracy.py [--budget 60] [--samples missing_amp,non_contiguous]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import torch
from torch.utils import benchmark

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from recommended import RECOMMENDED  # noqa: E402

from advisor.commands.audit import AuditOptions, run_audit  # noqa: E402
from advisor.rulekit.engine import load_rules  # noqa: E402
from advisor.rulekit.rule import Finding  # noqa: E402
from advisor.workload.step import make_step  # noqa: E402
from advisor.workload.target import load_target  # noqa: E402

SAMPLES = ["missing_amp", "non_contiguous", "conformer_conv", "resnet_style", "gpt_block", "kernel_storm",
           "per_feature_heads", "manual_attention", "manual_attention_train", "hf_eager_attention", "einsum_attention",
           "activation_chain", "recurrent_cell"]


def model_path(sample: str) -> str:
    bench_model = os.path.join(ROOT, "bench", "models", f"{sample}.py")
    return bench_model if os.path.exists(bench_model) else os.path.join(ROOT, "samples", f"{sample}.py")


def independent_speedup(target, candidate, min_run_time: float) -> float:
    times = []
    for side in (target, candidate):
        step = make_step(side, *side.fresh())
        for _ in range(3):
            step()  # warm-up, compilation included
        timer = benchmark.Timer("step()", globals={"step": step}, num_threads=torch.get_num_threads())
        times.append(timer.blocked_autorange(min_run_time=min_run_time).median)
    return times[0] / times[1]


def measure_independently(sample: str, finding_file: str, min_run_time: float) -> None:
    """(In a fresh process) the baseline against the recommended code; prints the speedup or '-'."""
    finding = Finding.model_validate_json(open(finding_file, encoding="utf-8").read())
    target = load_target(model_path(sample))
    build = RECOMMENDED.get((sample, finding.slug))
    try:
        recommended = build(target) if build is not None else load_rules().get(finding.slug).fix_spec.apply(target, finding)
        print(f"{independent_speedup(target, recommended, min_run_time):.4f}")
    except Exception as broken:  # noqa: BLE001 - a fix that breaks the model: advisor reports it too
        print(f"- {type(broken).__name__}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget", type=float, default=60.0, help="advisor's verification budget per audit (s)")
    parser.add_argument("--min-run-time", type=float, default=3.0, help="torch.utils.benchmark time per side (s)")
    parser.add_argument("--samples", default=",".join(SAMPLES))
    parser.add_argument("--independent", nargs=2, metavar=("SAMPLE", "FINDING_JSON"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.independent:
        measure_independently(*args.independent, args.min_run_time)
        return
    rows = []
    for sample in args.samples.split(","):
        with tempfile.TemporaryDirectory() as out:
            report = run_audit(AuditOptions(model_file=model_path(sample), out_dir=out, budget=args.budget)).report
            for finding in report.findings:
                v = finding.verification
                if v is None or v.speedup is None:
                    if v is not None and v.status not in ("not-verifiable-here", "skipped"):
                        rows.append((sample, finding.slug, v.status, None, None))
                    continue
                path = os.path.join(out, f"{finding.id}.json")
                with open(path, "w", encoding="utf-8") as handle:
                    handle.write(finding.model_dump_json())
                done = subprocess.run([sys.executable, __file__, "--independent", sample, path,
                                       "--min-run-time", str(args.min_run_time)], capture_output=True, text=True)
                text = (done.stdout.strip().splitlines() or ["-"])[-1]
                independent = float(text) if text[:1].isdigit() else None
                rows.append((sample, finding.slug, v.status, v.speedup, independent))
                print(f"  measured {sample}/{finding.slug}", file=sys.stderr)
    print(f"{'sample':<24} {'fix':<18} {'advisor verdict':<16} {'advisor':>8} {'independent':>12} {'ratio':>7}")
    for sample, slug, status, ours, theirs in rows:
        ours_text = f"{ours:.2f}x" if ours is not None else "-"
        theirs_text = f"{theirs:.2f}x" if theirs is not None else "-"
        ratio = f"{ours / theirs:.2f}" if ours is not None and theirs else "-"
        print(f"{sample:<24} {slug:<18} {status:<16} {ours_text:>8} {theirs_text:>12} {ratio:>7}")


if __name__ == "__main__":
    main()
