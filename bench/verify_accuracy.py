"""How close is advisor's verified speedup to an independent measurement of the recommended code?

For each bundled sample whose findings have a measurable fix, this script (run by hand, not
by the tests) measures the baseline and the recommended code with torch.utils.benchmark
(blocked_autorange, same thread count), then runs advisor's own verification of the fix, in the
same process, and prints the two speedups and their ratio. The recommended code is the fix
itself where the fix is what the report recommends (autocast, channels_last, torch.compile);
where advisor verifies through a graph rewrite (manual-attention), it is the hand-written
code of bench/recommended.py on the same weights. A ratio near 1.00 means advisor measured
what it recommends, and its interleaved A/B number agrees with a standard harness.
``manual_attention_train`` is the GPT causal block as a training step with dropout active.

The independent measurement runs first: later model instances in one process can run faster
than the first ones, because glibc's malloc stops page-faulting large per-step temporaries once
its thresholds have adapted (bf16 autocast on missing_amp: 6.3 ms per step with default
malloc, 2.7 ms with MALLOC_MMAP_THRESHOLD_ raised). Measuring in the same order keeps both
harnesses under the same allocator conditions.

    python bench/verify_accuracy.py [--budget 20] [--samples missing_amp,non_contiguous]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import torch
from torch.utils import benchmark

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from recommended import RECOMMENDED, training_variant  # noqa: E402

from advisor.engine import load_rules  # noqa: E402
from advisor.pipeline import AuditOptions, run_audit  # noqa: E402
from advisor.step import make_step  # noqa: E402
from advisor.target import load_target  # noqa: E402
from advisor.verify.run import Budget, verify_one  # noqa: E402

SAMPLES = ["missing_amp", "non_contiguous", "conformer_conv", "resnet_style", "gpt_block", "kernel_storm",
           "per_feature_heads", "manual_attention", "manual_attention_train", "hf_eager_attention", "einsum_attention",
           "activation_chain", "recurrent_cell"]
VARIANTS = {"manual_attention_train": ("manual_attention", training_variant)}


def independent_speedup(target, candidate, min_run_time: float) -> float:
    times = []
    for side in (target, candidate):
        step = make_step(side, *side.fresh())
        for _ in range(3):
            step()  # warm-up, compilation included
        timer = benchmark.Timer("step()", globals={"step": step}, num_threads=torch.get_num_threads())
        times.append(timer.blocked_autorange(min_run_time=min_run_time).median)
    return times[0] / times[1]


def _applied(spec, target, finding):
    try:
        return spec.apply(target, finding)
    except Exception:  # noqa: BLE001 - NotVerifiable and friends: advisor reports why
        return None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget", type=float, default=20.0, help="advisor's verification budget per fix (s)")
    parser.add_argument("--min-run-time", type=float, default=3.0, help="torch.utils.benchmark time per side (s)")
    parser.add_argument("--samples", default=",".join(SAMPLES))
    args = parser.parse_args()
    rules = load_rules()
    rows = []
    for sample in args.samples.split(","):
        file_stem, variant = VARIANTS.get(sample, (sample, None))
        path = os.path.join(ROOT, "samples", f"{file_stem}.py")
        with tempfile.TemporaryDirectory() as out:
            findings = run_audit(AuditOptions(model_file=path, out_dir=out, verify=False)).report.findings
        target = load_target(path)
        if variant is not None:
            target = variant(target)
        for finding in findings:
            spec = rules.get(finding.slug).fix_spec
            if spec is None or spec.unmeasurable(finding, str(target.device)) is not None:
                continue
            candidate = _applied(spec, target, finding)
            build = RECOMMENDED.get((sample, finding.slug))
            recommended = build(target) if build is not None else candidate
            independent = None
            if recommended is not None and recommended.loader_options == target.loader_options:
                try:
                    independent = independent_speedup(target, recommended, args.min_run_time)
                except Exception as broken:  # noqa: BLE001 - a fix that breaks the model: advisor says so too
                    print(f"  {sample}/{finding.slug}: the fixed model raised {type(broken).__name__}", file=sys.stderr)
            result = verify_one(target, [(finding, spec)], Budget(args.budget), lambda text: None, finding.slug)
            if result.speedup is None or independent is None:
                rows.append((sample, finding.slug, result.status, None, None, None))
                continue
            rows.append((sample, finding.slug, result.status, result.speedup, independent, result.speedup / independent))
            print(f"  measured {sample}/{finding.slug}", file=sys.stderr)
    print(f"{'sample':<20} {'fix':<16} {'advisor verdict':<16} {'advisor':>8} {'benchmark':>10} {'ratio':>7}")
    for sample, slug, status, ours, theirs, ratio in rows:
        if ours is None:
            print(f"{sample:<20} {slug:<16} {status:<16} {'-':>8} {'-':>10} {'-':>7}")
        else:
            print(f"{sample:<20} {slug:<16} {status:<16} {ours:>7.2f}x {theirs:>9.2f}x {ratio:>7.2f}")


if __name__ == "__main__":
    main()
