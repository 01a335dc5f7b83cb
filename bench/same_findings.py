"""Do two revisions of advisor find the same things? Run by hand after a change that must not change a finding
(a restructuring, a speed-up), on a quiet machine.

Replayed, deterministic: each revision's rule engine over its saved evidence of the samples (on the CPU as
recorded, and replayed as an A100) and of the DDP jobs, and each revision's ``advisor analyze`` over the HTA
traces in ``../shared``. A finding is the same when its rule, places, severity, message and impact are; fix
snippets and evidence numbers that differ are listed apart. Exit 1 when a replayed finding differs.

Live (``--live``): every sample both revisions have, audited ``--no-verify`` by each, alternately; the readiness
samples through ``advisor ready``; the single-process scripts through ``advisor run --no-verify``. Compared by
rule, places and severity, and by each readiness check's status. A measured share near its threshold can fall
either side between two runs of one revision, so ``--repeats N`` runs each sample that differed N more times
with each revision and prints what every run gave: a difference that both revisions give is a measurement.

Each revision is checked out into a temporary worktree and run from it (``PYTHONPATH``), without installing it.
Findings are paired by rule and places (file name and line), not by ``advisor diff``'s finding ids: the ids
are the engine's and may change between the revisions compared (they did within the restructuring).
Exit 1 also when a live run gave no report.

    python bench/same_findings.py BASE [HEAD] [--live] [--repeats 3] [--only 'audit/kernel*,run/*']
"""

from __future__ import annotations

import argparse
import fnmatch
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DUMP = os.path.join(ROOT, "bench", "findings_dump.py")
SHARED_TRACES = os.path.join(os.path.dirname(ROOT), "shared", "traces", "hta")
DECIDING = ("severity", "message", "impact", "layer", "code")
# scripts that run as one process (torchrun's jobs are left out: their ranks race by design)
SCRIPT_SKIP = ("ddp_",)


class Checkout:
    """One revision in a worktree of its own, run from its folder without installing it."""

    def __init__(self, revision: str, scratch: str):
        self.revision, self.folder = revision, os.path.join(scratch, revision.replace("/", "_"))
        subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", "-f", self.folder, revision], check=True,
                       capture_output=True)
        if os.path.isdir(os.path.join(self.folder, "rules")):  # a revision whose rule pack sat outside advisor/
            os.symlink(os.path.join("..", "rules"), os.path.join(self.folder, "advisor", "rules"))
        self.env = {**os.environ, "PYTHONPATH": self.folder}

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *args], cwd=self.folder, env=self.env, capture_output=True, text=True,
                              timeout=1800)

    def has(self, path: str) -> bool:
        return os.path.exists(os.path.join(self.folder, path))

    def remove(self) -> None:
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", self.folder], capture_output=True)


def replayed(checkout: Checkout) -> dict:
    done = checkout.run(DUMP)
    if done.returncode != 0:
        raise SystemExit(f"{checkout.revision}: the replay failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def analyzed(checkout: Checkout, scratch: str) -> dict:
    found = {}
    traces = sorted(glob.glob(os.path.join(SHARED_TRACES, "**", "*.json.gz"), recursive=True))
    for number, trace in enumerate(traces):
        out = os.path.join(scratch, f"analyze-{checkout.revision}-{number}")
        checkout.run("-m", "advisor", "analyze", trace, "--out", out, "--format", "json", "--fail-on", "info")
        report = _report(out)
        found[os.path.relpath(trace, SHARED_TRACES)] = [
            {"slug": f["slug"], "severity": f["severity"], "message": f["message"], "impact": f.get("impact"),
             "places": [[os.path.basename(p.get("file") or ""), p.get("line")] for p in f.get("locations", [])],
             "layer": f.get("layer"), "code": f.get("code")}
            for f in (report or {}).get("findings", [])]
    return found


def _report(out: str) -> dict | None:
    reports = glob.glob(os.path.join(out, "*.json"))
    if not reports:
        return None
    with open(reports[0], encoding="utf-8") as handle:
        return json.load(handle)


def compare_replayed(before: dict, after: dict, label: str) -> int:
    """Print what differs; the number of findings whose deciding fields differ (or that only one side has)."""
    differing = same = 0
    for case in sorted(set(before) | set(after)):
        old = {_key(f): f for f in before.get(case, [])}
        new = {_key(f): f for f in after.get(case, [])}
        for key in sorted(set(old) | set(new), key=str):
            if key not in old or key not in new:
                differing += 1
                print(f"  {label} {case}: {key[0]} at {key[1]} only in {'the second' if key in new else 'the first'}")
                continue
            changed = [field for field in DECIDING if old[key].get(field) != new[key].get(field)]
            if changed:
                differing += 1
                for field in changed:
                    print(f"  {label} {case}: {key[0]} {field}: {old[key].get(field)!r} -> {new[key].get(field)!r}")
            else:
                same += 1
            for field in ("evidence", "fix"):
                if old[key].get(field) != new[key].get(field):
                    print(f"  ({label} {case}: {key[0]}'s {field} differs: {_changed(old[key][field], new[key][field])})")
    print(f"{label}: {len(set(before) | set(after))} cases, {same} findings the same, {differing} different")
    return differing


def _key(finding: dict) -> tuple:
    return finding["slug"], json.dumps(finding["places"])


def _changed(old, new) -> str:
    if isinstance(old, dict) and isinstance(new, dict):
        return ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(set(old) | set(new))
                         if old.get(k) != new.get(k))[:400]
    return f"{old!r} -> {new!r}"[:400]


def live_cases(first: Checkout, second: Checkout, only: str) -> list[tuple[str, list[str]]]:
    """(name, advisor's arguments) for every sample both revisions have whose name matches one of ``only``."""
    cases = []
    for path in sorted(glob.glob(os.path.join(ROOT, "samples", "*.py"))):
        cases.append((f"audit/{os.path.basename(path)[:-3]}", ["audit", os.path.relpath(path, ROOT), "--no-verify"]))
    for path in sorted(glob.glob(os.path.join(ROOT, "samples", "ready", "*.py"))):
        cases.append((f"ready/{os.path.basename(path)[:-3]}", ["ready", os.path.relpath(path, ROOT)]))
    for path in sorted(glob.glob(os.path.join(ROOT, "samples", "scripts", "*.py"))):
        name = os.path.basename(path)[:-3]
        if not name.startswith(SCRIPT_SKIP):
            cases.append((f"run/{name}", ["run", "--no-verify", "--", "python", os.path.relpath(path, ROOT)]))
    return [(name, args) for name, args in cases if any(fnmatch.fnmatch(name, p) for p in only.split(","))
            and first.has(_sample_path(args)) and second.has(_sample_path(args))]


def _sample_path(args: list[str]) -> str:
    return args[-1] if args[0] == "run" else args[1]


def outcome(checkout: Checkout, args: list[str], out: str) -> tuple[dict, dict]:
    """What one live run found: {finding key: severity}, plus each readiness check's status; and each rule's
    margin (what decided it against its threshold), where the report gives one."""
    options = ["--out", out, "--format", "json", "--quiet"] + (["--fail-on", "info"] if args[0] != "ready" else [])
    command = args[:1] + options + args[1:] if args[0] == "run" else args + options
    done = checkout.run("-m", "advisor", *command)
    report = _report(out)
    if report is None:
        return {"no report": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1][:300]}, {}
    found = {f"{f['slug']} at {sorted((os.path.basename(p.get('file') or ''), p.get('line')) for p in f['locations'])}":
             f["severity"] for f in report.get("findings", [])}
    for check in ((report.get("readiness") or {}).get("checks") or []):
        found[f"check {check['id']}"] = check["status"]
    margins = {run["slug"]: run["margin"] for run in report.get("rules", []) if run.get("margin")}
    shutil.rmtree(out, ignore_errors=True)
    return found, margins


def _margin(margins: dict, key: str) -> str:
    """The deciding value of the key's rule against its threshold, where the report has it."""
    margin = margins.get(key.split(" ")[0])
    return f" ({margin['quantity']} {margin['value']:.3g} against {margin['threshold']:.3g})" if margin else ""


def compare_live(first: Checkout, second: Checkout, scratch: str, repeats: int, only: str) -> int:
    """Print what differs; the number of samples that gave no report (a failure, not a difference)."""
    differing = []
    cases = live_cases(first, second, only)
    failed = 0
    for name, args in cases:
        runs = [outcome(c, args, os.path.join(scratch, f"live-{c.revision}")) for c in (first, second)]
        if any("no report" in found for found, _ in runs):  # a run that failed in both is no sameness
            failed += 1
            print(f"  {name}: no report: " + " | ".join(f"{c.revision}: {found.get('no report', 'ran')}"
                                                        for c, (found, _) in zip((first, second), runs)))
        elif runs[0][0] != runs[1][0]:
            differing.append((name, args, runs))
    print(f"live: {len(cases)} samples, {len(cases) - len(differing) - failed} the same, {len(differing)} "
          f"different, {failed} without a report")
    for name, args, ((old, old_margins), (new, new_margins)) in differing:
        keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        print(f"  {name}:")
        for key in keys:
            print(f"    {key}: {old.get(key)}{_margin(old_margins, key)} -> {new.get(key)}{_margin(new_margins, key)}")
        for _ in range(repeats):
            again = [outcome(c, args, os.path.join(scratch, f"live-{c.revision}")) for c in (first, second)]
            print("    again: " + " | ".join(
                f"{c.revision}: " + ", ".join(f"{run.get(k)}{_margin(margins, k)}" for k in keys)
                for c, (run, margins) in zip((first, second), again)))
    return failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("first")
    parser.add_argument("second", nargs="?", default="HEAD")
    parser.add_argument("--live", action="store_true", help="also audit every sample with each revision")
    parser.add_argument("--repeats", type=int, default=3, help="runs again of each sample whose live findings differ")
    parser.add_argument("--only", default="*", help="live cases to run, as comma-separated patterns of their names "
                                                    "(audit/NAME, ready/NAME, run/NAME)")
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="same-findings-")
    checkouts = []
    try:
        checkouts = [Checkout(revision, scratch) for revision in (args.first, args.second)]
        differing = compare_replayed(*(replayed(c) for c in checkouts), "saved evidence")
        if os.path.isdir(SHARED_TRACES):
            differing += compare_replayed(*(analyzed(c, scratch) for c in checkouts), "analyze")
        if args.live:
            differing += compare_live(*checkouts, scratch, args.repeats, args.only)
    finally:
        for checkout in checkouts:
            checkout.remove()
        shutil.rmtree(scratch, ignore_errors=True)
    sys.exit(1 if differing else 0)


if __name__ == "__main__":
    main()
