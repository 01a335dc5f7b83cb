"""Record the evidence fixtures of the fast test tier: a real audit of every bundled sample.

    python tests/record_evidence.py [SAMPLE ...]
    python tests/record_evidence.py --ddp     # rank 0 of the 2-rank gloo DDP scripts, through torchrun

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
from devkit.saved_evidence import DDP_DIR, ROOT, save_evidence  # noqa: E402

DDP_SCRIPTS = ("ddp_train", "ddp_clean")


def record(sample: str) -> None:
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


if __name__ == "__main__":
    if sys.argv[1:] == ["--ddp"]:
        for script in DDP_SCRIPTS:
            record_ddp(script)
        sys.exit(0)
    names = sys.argv[1:] or sorted(p.stem for p in (ROOT / "samples").glob("*.py"))
    for name in names:
        record(name)
