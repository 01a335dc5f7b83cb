"""Run advisor on the real public scripts of ``../shared/corpus`` exactly as each case's ``RUN.md`` says, and print
what a performance engineer reads first: the step advisor read (mode, model, what one step contained and how it was
recognised), the findings with their places and severities, every rule that stayed silent with its margin or the
reason it did not apply, and the wall time. By hand; never part of the test suite.

Each case is prepared into a scratch folder of its own (``python $CASE/prepare.py $WORK``), then every
``advisor run`` command of its RUN.md's "Run under advisor" block runs from there, ``$CASE`` and ``$WORK`` filled in,
with ``advisor`` run by the case's interpreter (``python -m advisor``) so that the script and advisor share one
environment. Cases that need an environment of their own name it with ``--python CASE=PATH``:

    python bench/corpus.py --python cleanrl-dqn=/path/venv-cleanrl/bin/python [--verify] [--only 'lightning*']

The reports stay in each scratch folder (printed); ``--keep`` keeps the folders. Exit 1 when a run gave no report.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(os.path.dirname(ROOT), "shared", "corpus")
SEVERITY_ORDER = ("high", "medium", "low", "info")


def advisor_commands(run_md: str) -> list[str]:
    """The shell commands of the RUN.md's "Run under advisor" section that run advisor (continuations joined)."""
    section = re.search(r"^## Run under advisor\s*$(.*?)(?=^## |\Z)", run_md, re.M | re.S)
    if section is None:
        return []
    commands = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", section.group(1), re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        commands += [line.strip() for line in joined.splitlines() if re.search(r"(^|\s)advisor run\b", line)]
    return commands


def as_run_by(command: str, python: str, out: str, extra: list[str]) -> str:
    """The RUN.md's command with advisor run by the case's interpreter, its reports written to ``out``."""
    before, _, after = command.partition("advisor run")
    options = " ".join(shlex.quote(o) for o in ["--out", out, *extra])
    return f"{before}{shlex.quote(python)} -m advisor run {options}{after}"


def describe_step(report: dict) -> str:
    target = report.get("target") or {}
    step = target.get("step") or {}
    timing = report.get("timing") or {}
    parts = [f"{target.get('model_class') or '?'} · {target.get('mode') or '?'} · {target.get('device') or '?'}"]
    if timing:
        parts.append(f"step {timing.get('median_ms', 0):.3g} ms (IQR {timing.get('p25_ms', 0):.3g}–"
                     f"{timing.get('p75_ms', 0):.3g}, n={len(timing.get('samples_ms') or [])})")
    if step:
        parts.append(f"one step: {step.get('summary', '')}")
        if step.get("recognised_by"):
            parts.append(f"recognised by {step['recognised_by']}")
    return "\n      ".join(parts)


def summarize(report: dict) -> list[str]:
    lines = [f"    step: {describe_step(report)}"]
    quality = report.get("quality") or {}
    lines.append(f"    machine: {quality.get('state', '?')}: {quality.get('summary', '')[:200]}")
    for stage in report.get("stages") or []:
        if stage.get("note"):
            lines.append(f"    {stage['stage']}: {stage['note'][:400]}")
    for error in report.get("errors") or []:
        lines.append(f"    ERROR {error.get('stage')}: {error.get('message', '')[:300]}")
    findings = sorted(report.get("findings") or [], key=lambda f: SEVERITY_ORDER.index(f.get("severity", "info")))
    for finding in findings:
        places = ", ".join(f"{os.path.basename(p.get('file') or '?')}:{p.get('line')}" for p in finding.get("locations", []))
        verdict = ((finding.get("verification") or {}).get("status") or "")
        lines.append(f"    {finding['severity'].upper():6} {finding['slug']}: {finding['message'][:220]}")
        lines.append(f"           at {places or '(no place)'}{'  fix: ' + verdict if verdict else ''}")
    for decided in report.get("rules") or []:
        if decided["status"] == "fired":
            continue
        margin = decided.get("margin")
        if margin:
            why = f"{margin['quantity']} {margin['value']:.4g} against {margin['threshold']:.4g}"
        else:
            why = decided.get("why") or "NO MARGIN AND NO REASON"
        flag = f" [unreliable: {decided['unreliable']}]" if decided.get("unreliable") else ""
        lines.append(f"      {decided['status']:8} {decided['slug']}: {why[:200]}{flag}")
    return lines


def run_case(case: str, python: str, args: argparse.Namespace) -> bool:
    folder = os.path.join(CORPUS, case)
    with open(os.path.join(folder, "RUN.md"), encoding="utf-8") as handle:
        commands = advisor_commands(handle.read())
    if not commands:
        print(f"== {case}: no 'advisor run' command in RUN.md")
        return False
    ok = True
    for index, command in enumerate(commands):
        work = tempfile.mkdtemp(prefix=f"corpus-{case}-")
        # the case's interpreter is the `python` its command names, as an activated environment would make it
        env = {**os.environ, "CASE": folder, "WORK": work,
               "PATH": os.path.dirname(python) + os.pathsep + os.environ.get("PATH", "")}
        subprocess.run([python, os.path.join(folder, "prepare.py"), work], check=True, capture_output=True, env=env)
        out = os.path.join(work, "advisor-reports")
        extra = ([] if args.verify else ["--no-verify"]) + args.advisor_args
        shell = as_run_by(command, python, out, extra)
        started = time.monotonic()
        done = subprocess.run(["bash", "-c", shell], cwd=work, env=env, capture_output=True, text=True,
                              timeout=args.timeout)
        wall = time.monotonic() - started
        reports = sorted(n for n in os.listdir(out) if n.endswith(".json")) if os.path.isdir(out) else []
        print(f"== {case} [{index + 1}/{len(commands)}]: {command}")
        print(f"    exit {done.returncode}, {wall:.1f} s wall; reports in {out}")
        if not reports:
            ok = False
            print("    NO REPORT; stderr tail:\n" + "\n".join("      " + line for line in done.stderr.splitlines()[-15:]))
        for name in reports:
            with open(os.path.join(out, name), encoding="utf-8") as handle:
                print("\n".join(summarize(json.load(handle))))
        sys.stdout.flush()
        if not args.keep and reports:
            kept = os.path.join(args.reports, f"{case}-{index + 1}") if args.reports else None
            if kept:
                shutil.copytree(out, kept, dirs_exist_ok=True)
            shutil.rmtree(work, ignore_errors=True)
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", action="append", default=[], metavar="CASE=PATH",
                        help="the interpreter of a case that needs its own environment")
    parser.add_argument("--default-python", default=sys.executable, help="the interpreter of every other case")
    parser.add_argument("--only", default="*", help="comma-separated glob patterns of case names")
    parser.add_argument("--verify", action="store_true", help="verify the fixes too (default: --no-verify)")
    parser.add_argument("--keep", action="store_true", help="keep each case's scratch folder")
    parser.add_argument("--reports", default="", help="copy each case's reports into this folder")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds one advisor run may take")
    parser.add_argument("advisor_args", nargs="*", help="further options for advisor run (after --)")
    args = parser.parse_args()
    if not os.path.isdir(CORPUS):
        print(f"no corpus at {CORPUS}")
        return 1
    pythons = dict(entry.split("=", 1) for entry in args.python)
    patterns = args.only.split(",")
    cases = sorted(c for c in os.listdir(CORPUS) if os.path.isfile(os.path.join(CORPUS, c, "RUN.md"))
                   and any(fnmatch.fnmatch(c, p) for p in patterns))
    results = [run_case(case, pythons.get(case, args.default_python), args) for case in cases]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
