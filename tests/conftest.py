"""Shared helpers: write model files, run real audits (cached per session), find fixtures."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import pickle
import sys
import textwrap
from pathlib import Path

import pytest

from advisor.commands.audit import AuditOptions, AuditResult, run_audit

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
SHARED_TRACES = ROOT.parent / "shared" / "traces" / "hta"

# The rules that judge the machine the suite runs on, which another job may share: the suite's tests of a
# model's findings leave them out (every run started from here, subprocesses too, inherits this), and
# tests/test_hardware_rules.py tests them, clearing it (``machine_rules`` fixture).
MACHINE_STATE_RULES = "shared-machine,steal-time,cpu-quota"
os.environ["ADVISOR_DISABLE"] = MACHINE_STATE_RULES
# Nor do they wait for a busy machine to be quiet before timing again (it may be busy all along: every audit would
# wait its 15 s); tests/test_hardware_rules.py tests the wait.
os.environ["ADVISOR_WAIT_FOR_QUIET"] = "0"
# Nor do the xdist workers oversubscribe the machine (the mistake cpu-threads reports): each worker's processes
# get their share of the cores as intra-op threads. With more threads than cores, each of a step's parallel
# regions waits for a thread another worker's process holds descheduled: beside a busy-loop, recurrent_cell's
# audit took 44 s with two threads, 9 s with one (quiet: 9 s with two). What the tests check is what advisor
# finds and where; the threads a model runs with are its own where it sets them (oversubscribed_threads).
THREADS_ENV, SUITE_THREADS_ENV = "OMP_NUM_THREADS", "ADVISOR_SUITE_THREADS"
if os.environ.get(THREADS_ENV) in (None, os.environ.get(SUITE_THREADS_ENV)):  # unless the caller chose
    # xdist's controller set both before it started its workers; each worker sizes its own share
    _share = str(max(1, len(os.sched_getaffinity(0)) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))
    os.environ[THREADS_ENV] = os.environ[SUITE_THREADS_ENV] = _share


def pytest_configure(config):
    """The machine's roofs measured once, before xdist starts its workers, with a worker's share of the cores as
    threads: every audit of the suite then reads them from the cache. Measured beside the workers they would be
    contended, and a contended measurement is never cached (capture/calibrate.py): each audit would measure again."""
    import subprocess

    if hasattr(config, "workerinput") or os.environ.get("ADVISOR_CACHE_DIR"):
        return  # a worker (the controller measured), or a cache of the caller's own
    workers = getattr(config.option, "numprocesses", None) or 1
    share = str(max(1, len(os.sched_getaffinity(0)) // (workers if isinstance(workers, int) else 1)))
    measure = ("import torch; from advisor.capture.calibrate import machine_peaks; from advisor.capture.env import "
               "device_name; machine_peaks(torch.device('cpu'), device_name(torch.device('cpu')))")
    subprocess.run([sys.executable, "-c", measure], env={**os.environ, THREADS_ENV: share}, timeout=300,
                   capture_output=True, check=False)


def verified_unless_contended(verification) -> bool:
    """A fix that helps is verified; only where its pairs ran while another job held the CPUs may the interval be
    too wide to say so (inconclusive, the honest verdict there). On a quiet machine nothing but verified passes."""
    from advisor.machine.conditions import judge

    return verification.status == "verified" or (verification.status == "inconclusive"
                                                 and bool(judge(verification.conditions)))


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items):
    """Each test file is one xdist group (its tests share its fixtures, and torchrun's jobs one port), but for
    a test that names a group of its own: the runs of a script that writes one fixed path (train_loop's
    checkpoint in /tmp) are one group across files."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))


# Tests over every bundled sample's saved evidence run on one worker, which parses the samples' traces once (7 s
# here, of a fast tier of 35 s) instead of once in each worker that reaches them.
ALL_SAMPLES = pytest.mark.xdist_group("saved-evidence")


@pytest.fixture
def machine_rules(monkeypatch):
    """The machine-state rules on, for the test that judges them."""
    monkeypatch.delenv("ADVISOR_DISABLE")


# A model whose class name, source line and output carry markup: reports must keep it text.
HOSTILE_MODEL = """
    import torch
    def _forward(self, x):
        y = self.lin(x)
        if y.sum() > 0:  # <img src=x onerror=alert(1)>
            print("<script>alert('stdout')</script>")
        return y
    Hostile = type("<script>alert('class')</script>", (torch.nn.Module,), {"forward": _forward})
    def get_model():
        model = Hostile()
        model.lin = torch.nn.Linear(2, 2)
        return model
    def get_inputs(): return torch.ones(1, 2)
"""


def write_model(directory: Path, source: str, name: str = "model.py") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(source).lstrip(), encoding="utf-8")
    return path


def audit(path: Path, out_dir: Path, progress=lambda text: None, **options) -> AuditResult:
    """A real audit; fix verification only where a test asks for it (it costs its budget)."""
    options.setdefault("timeout", 120)
    options.setdefault("verify", False)
    return run_audit(AuditOptions(model_file=str(path), out_dir=str(out_dir), **options), progress)


@pytest.fixture(scope="session")
def sample_audit(tmp_path_factory):
    """Audit a bundled sample once per test session: ``sample_audit("host_sync")``. The session's xdist workers
    share the audits: the first to ask audits (the others wait on the sample's lock) and leaves the result,
    pickled, for the others to read; test files on every worker ask for the same samples."""
    cache: dict[str, AuditResult] = {}
    shared = _session_folder(tmp_path_factory) / "sample-audits"
    shared.mkdir(exist_ok=True)

    def run(name: str) -> AuditResult:
        if name not in cache:
            cache[name] = _shared_audit(name, shared)
        return cache[name]

    return run


@contextlib.contextmanager
def _machine_rules_left_out():
    before = os.environ.get("ADVISOR_DISABLE")
    os.environ["ADVISOR_DISABLE"] = MACHINE_STATE_RULES
    try:
        yield
    finally:
        if before is None:
            del os.environ["ADVISOR_DISABLE"]
        else:
            os.environ["ADVISOR_DISABLE"] = before


def _session_folder(tmp_path_factory) -> Path:
    """This test session's folder, the same for all its xdist workers (each has a subfolder of it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _shared_audit(name: str, shared: Path) -> AuditResult:
    saved = shared / f"{name}.pickle"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if saved.exists():
            with open(saved, "rb") as handle:
                return pickle.load(handle)
        out_dir = shared / f"{name}-reports"
        out_dir.mkdir()
        with _machine_rules_left_out():  # whichever test asks first: machine_rules may have turned them on
            result = audit(SAMPLES / f"{name}.py", out_dir)
        partial = saved.with_suffix(".partial")
        with open(partial, "wb") as handle:
            pickle.dump(result, handle, protocol=pickle.HIGHEST_PROTOCOL)
        partial.rename(saved)
        return result


def file_states(root) -> dict[str, tuple]:
    """Every entry under ``root`` (the root too): its bytes' digest, modification time and inode, so that even a
    write of the same bytes shows."""
    found = {".": (os.stat(root).st_mtime_ns,)}
    for folder, dirs, names in os.walk(root):
        for name in dirs + names:
            path = os.path.join(folder, name)
            state = os.lstat(path)
            digest = ""
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as handle:
                    digest = hashlib.sha1(handle.read()).hexdigest()
            found[os.path.relpath(path, root)] = (digest, state.st_mtime_ns, state.st_ino)
    return found


def read_only_folder() -> str | None:
    """A folder of a file system mounted read-only on this machine, if there is one."""
    with open("/proc/mounts") as mounts:
        for line in mounts:
            fields = line.split()
            if len(fields) > 3 and "ro" in fields[3].split(",") and os.path.isdir(fields[1]):
                if not fields[1].startswith(("/proc", "/sys", "/dev")):
                    return fields[1]
    return None


def line_of(path: Path, marker: str) -> int:
    """The 1-based line number of the first line containing ``marker``."""
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if marker in text:
            return number
    raise AssertionError(f"{marker!r} not in {path}")


def slugs(result: AuditResult) -> set[str]:
    return {f.slug for f in result.report.findings}


def only_finding(result: AuditResult, slug: str):
    """The one finding of ``slug`` in an audit (fails listing what fired otherwise)."""
    found = [f for f in result.report.findings if f.slug == slug]
    assert len(found) == 1, [f.slug for f in result.report.findings]
    return found[0]


def share_finding(result, slug: str):
    """The one finding of ``slug``, a verdict on a share of the step, or None where the run was measured on a
    contended machine and the rule fell silent: a busy core stretches each operator, so shares move with the
    load. Its silence must then say so (its margin marked unreliable in a contended report); on a quiet
    machine nothing but the finding passes. ``result``: an AuditResult, or the Python API's Report."""
    report = getattr(result, "report", result)
    found = [f for f in report.findings if f.slug == slug]
    if found:
        assert len(found) == 1, [f.slug for f in report.findings]
        return found[0]
    run = next(r for r in report.rules if r.slug == slug)
    assert report.quality.state == "contended" and run.unreliable, (
        f"{slug} silent on a {report.quality.state} run", run, [f.slug for f in report.findings])
    return None


def check_rule(slug: str, evidence) -> list:
    """One built-in rule's findings over some evidence, with its default thresholds (not the margins and reasons
    it yields beside them)."""
    from advisor.rulekit.engine import load_rules, thresholds_for
    from advisor.rulekit.rule import Finding

    rule = load_rules().get(slug)
    return [item for item in rule.check(evidence, thresholds_for(rule, {})) if isinstance(item, Finding)]


def verify_fix(model_file: Path, finding, slug: str, pairs: int = 10):
    """Measure one finding's fix on a model file, as the verification child would: a run count, the same
    work however fast or busy the machine."""
    from advisor.rulekit.engine import load_rules
    from advisor.verify.copies import Budget, verify_one
    from advisor.workload.target import load_target

    spec = load_rules().get(slug).fix_spec
    return verify_one(load_target(str(model_file)), [(finding, spec)], Budget(0), lambda text: None, slug, pairs)


def verify_sample(sample: str, finding, slug: str, pairs: int = 10):
    return verify_fix(SAMPLES / f"{sample}.py", finding, slug, pairs)


def shared_trace(relative: str) -> Path:
    path = SHARED_TRACES / relative
    if not path.exists():
        pytest.skip(f"shared trace fixture {relative} is not present (../shared/traces/hta)")
    return path


os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")


@pytest.fixture(autouse=True)
def _process_flags_restored():
    """Model files loaded in this process (verify_fix) set process-wide flags at import: thread count
    (oversubscribed_threads), anomaly mode (anomaly_left_on), cuDNN and matmul settings. Later in-process
    audits (the Python API's) must not inherit them, in whatever order the tests run."""
    from advisor.verify.copies import process_flags, restore_flags

    flags = process_flags()
    yield
    restore_flags(flags)


@pytest.fixture(autouse=True)
def _fast_tests_run_no_model(request, monkeypatch):
    """The fast tier reads saved evidence: a test not marked slow that starts a live audit fails here."""
    if request.node.get_closest_marker("slow") is not None:
        return

    def refused(*args, **kwargs):
        raise AssertionError(f"{request.node.nodeid} runs a live model but is not marked slow")
    import advisor.commands.audit
    import advisor.commands.ready
    import advisor.commands.run
    import advisor.sandbox.inline

    monkeypatch.setattr(advisor.commands.audit, "run_capture", refused)
    monkeypatch.setattr(advisor.commands.ready, "run_capture", refused)
    monkeypatch.setattr(advisor.commands.run, "launch", refused)
    monkeypatch.setattr(advisor.sandbox.inline, "run_stages", refused)
