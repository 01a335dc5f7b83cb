"""Record the evidence fixtures of the fast test tier: a real audit of every bundled sample.

    python tests/record_evidence.py [SAMPLE ...]
    python tests/record_evidence.py --ddp     # rank 0 of the 2-rank gloo DDP scripts, through torchrun
    python tests/record_evidence.py --runs [SCRIPT ...]  # advisor run's steps, step log and collector's passes

Run it after a change to capture (not to rules: rules are what the fixtures test). Record on a
quiet machine: the timings and profiles in the fixtures are this machine's measurements, and
the fast tier then checks the rules' verdicts on exactly these numbers.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # devkit: the saved evidence

from advisor.commands.audit import AuditOptions, run_audit  # noqa: E402
from advisor.commands.run import RunOptions, run_script  # noqa: E402
from devkit.saved_evidence import DDP_DIR, ROOT, relocatable, save_evidence  # noqa: E402

DDP_SCRIPTS = ("ddp_train", "ddp_clean")
RUN_SCRIPTS = ("gc_records", "growing_history", "rollout_loop", "clean_train")  # the run rules' positives, their negative
RUNS_DIR = ROOT / "tests" / "data" / "runs"


def record(sample: str) -> None:
    """A sample's audit, under the environment its ``# record with: VAR=value ...`` line names (the CPU a rule is
    for, emulated: ``ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2`` records a CPU without native bf16)."""
    import os
    import re

    text = (ROOT / "samples" / f"{sample}.py").read_text(encoding="utf-8")
    wanted = dict(pair.split("=", 1) for line in re.findall(r"^# record with: (.+)$", text, re.M) for pair in line.split())
    saved = {name: os.environ.get(name) for name in wanted}
    os.environ.update(wanted)
    try:
        _record(sample)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _record(sample: str) -> None:
    with tempfile.TemporaryDirectory() as out:
        result = run_audit(AuditOptions(model_file=str(ROOT / "samples" / f"{sample}.py"), out_dir=out, verify=False))
        if result.report.errors:
            raise SystemExit(f"{sample}: the audit failed: {[e.message for e in result.report.errors]}")
        trace = Path(out) / f"{sample}.trace.json.gz"
        save_evidence(sample, result.evidence, str(trace) if trace.exists() else None)
        print(f"{sample}: {sorted(f.slug for f in result.report.findings)}", flush=True)


def record_ddp(script: str) -> None:
    with tempfile.TemporaryDirectory() as out:
        command = (shutil.which("torchrun"), "--nproc-per-node", "2", str(ROOT / "samples" / "scripts" / f"{script}.py"))
        result = run_script(RunOptions(command=command, out_dir=out, verify=False))
        if result.report.errors:
            raise SystemExit(f"{script}: the run failed: {[e.message for e in result.report.errors]}")
        save_evidence(script, result.evidence, str(Path(out) / f"{script}.ranks" / "rank0.trace.json.gz"), DDP_DIR)
        print(f"{script}: {sorted(f.slug for f in result.report.findings)}", flush=True)


def record_run(script: str) -> None:
    """What the run rules read of an ``advisor run`` of the script: its timed steps, every step's log and the
    collector's passes."""
    import json

    with tempfile.TemporaryDirectory() as out:
        command = (sys.executable, str(ROOT / "samples" / "scripts" / f"{script}.py"))
        result = run_script(RunOptions(command=command, out_dir=out, verify=False))
        if result.report.errors or result.evidence.collector is None or result.evidence.step_log is None:
            raise SystemExit(f"{script}: the run failed or logged no steps: {result.report.errors}")
        RUNS_DIR.mkdir(exist_ok=True)
        recorded = {"samples_ms": [round(ms, 4) for ms in result.evidence.timing.samples_ms],
                    "collector": result.evidence.collector.model_dump(mode="json"),
                    "step_log": result.evidence.step_log.model_dump(mode="json")}
        (RUNS_DIR / f"{script}.json").write_text(relocatable(json.dumps(recorded, indent=1)) + "\n", encoding="utf-8")
        print(f"{script}: {sorted(f.slug for f in result.report.findings)}", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--runs"]:
        for script in sys.argv[2:] or RUN_SCRIPTS:
            record_run(script)
        sys.exit(0)
    if sys.argv[1:] == ["--ddp"]:
        for script in DDP_SCRIPTS:
            record_ddp(script)
        sys.exit(0)
    names = sys.argv[1:] or sorted(p.stem for p in (ROOT / "samples").glob("*.py"))
    for name in names:
        record(name)
