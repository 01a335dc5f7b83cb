"""Saved evidence of real audits of the bundled samples: what the fast test tier runs rules over.

Each sample has ``tests/data/evidence/<sample>.evidence.json.gz`` (the Evidence, without its
trace) and ``<sample>.trace.json.gz`` (the Kineto trace the audit recorded, without the Python
frames that no rule reads). Paths under the repository are stored as
``{ROOT}`` so the fixtures hold on any checkout. ``python tests/record_evidence.py`` records
them again (after a change to capture); the rules' verdicts on them are then re-checked by the
fast tier.
"""

from __future__ import annotations

import functools
import gc
import gzip
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from advisor.evidence import Evidence
from advisor.sources import is_library_path
from advisor.trace.parse import SOURCE_ANNOTATION, parse_trace
from advisor.trace.stream import EventStream

ROOT = Path(__file__).resolve().parent.parent  # the checkout
EVIDENCE_DIR = ROOT / "tests" / "data" / "evidence"
# rank 0 of `advisor run -- torchrun --nproc-per-node 2 samples/scripts/<script>.py` (2 gloo ranks)
DDP_DIR = ROOT / "tests" / "data" / "ddp"
PLACEHOLDER = "{ROOT}"


def recorded_samples() -> list[str]:
    return sorted(p.name[: -len(".evidence.json.gz")] for p in EVIDENCE_DIR.glob("*.evidence.json.gz"))


@functools.lru_cache(maxsize=None)
def saved_evidence(sample: str, folder: Path = EVIDENCE_DIR) -> Evidence:
    """The evidence a real audit of ``samples/<sample>.py`` recorded (shared: copy before changing)."""
    text = _read(folder / f"{sample}.evidence.json.gz")
    evidence = Evidence.model_validate_json(text)
    trace_file = folder / f"{sample}.trace.json.gz"
    if trace_file.exists():
        with tempfile.TemporaryDirectory() as scratch:
            path = os.path.join(scratch, f"{sample}.trace.json")
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(_read(trace_file))
            evidence.trace = parse_trace(path)
    # kept for the process's life: out of the cyclic collector's walks, which visited closure_lstm's half a million
    # ops at every full collection (18 s of a test worker's exit, in pytest's final collections)
    gc.freeze()
    return evidence


def _read(path: Path) -> str:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return relocated(handle.read())


def relocated(text: str) -> str:
    """A fixture's JSON with this checkout's paths where the recording had its own (``relocatable``)."""
    return text.replace(PLACEHOLDER, _json_path(ROOT))


def relocatable(text: str) -> str:
    """JSON with this checkout's folder replaced by the placeholder, for a fixture read on any machine."""
    return text.replace(_json_path(ROOT), PLACEHOLDER)


def _json_path(path: Path) -> str:
    return json.dumps(str(path))[1:-1]  # as the path appears inside a JSON string


def save_evidence(sample: str, evidence: Evidence, trace_path: str | None, folder: Path = EVIDENCE_DIR) -> None:
    """Write one sample's fixtures (called by tests/record_evidence.py)."""
    folder.mkdir(parents=True, exist_ok=True)
    text = evidence.model_dump_json(exclude={"trace", "ranks"})
    _write(folder / f"{sample}.evidence.json.gz", text)
    trace_file = folder / f"{sample}.trace.json.gz"
    if trace_path is None:
        trace_file.unlink(missing_ok=True)
        return
    stream = EventStream(trace_path)  # repairs the names the profiler writes with bare quotes
    events = list(stream.events())
    trace = {**stream.members, "traceEvents": events}
    annotated = any(str(e.get("name", "")).startswith(SOURCE_ANNOTATION) for e in trace["traceEvents"])
    trace["traceEvents"] = [e for e in trace["traceEvents"] if not _dropped(e, annotated)]
    _write(trace_file, json.dumps(trace, separators=(",", ":")))


def _dropped(event: dict, annotated: bool) -> bool:
    """Python frames no rule reads, which are most of a trace recorded with stacks: all of them
    when advisor's source annotations attribute the ops, else those of PyTorch and Python."""
    if event.get("cat") != "python_function":
        return False
    if annotated:
        return True
    head = str(event.get("name", "")).partition("): ")[0]
    return is_library_path(head.rpartition("(")[0])


def _write(path: Path, text: str) -> None:
    text = relocatable(text)
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=9) as handle:
        handle.write(text)


# --- what each sample must make advisor say, written in the sample itself ------------------------------
# ``# expect: slug[, slug]`` on a line: the rule fires and points at that line; ``# expect anywhere: slug``,
# ``# expect on cuda: slug`` (when the evidence is replayed as a CUDA run), ``# expect under torchrun: slug``
# (a script's torchrun job), ``# expect anywhere before torch 2.14: slug`` (what the installed PyTorch
# decides: Dynamo 2.14 traces a torch.save that 2.13 breaks the graph on), ``# expect where bf16 is emulated: slug``
# (what the CPU decides: the rule fires, at that line, where the evidence's CPU has no native bf16, and is silent
# where it has) and ``# expect nothing`` at the end
# of the file. A new sample (or a new rule's positive and negative samples) is collected by the tests as it is
# written: no list to keep by hand.
_EXPECT = re.compile(r"#.*?\bexpect(?P<where> anywhere| on cuda| under torchrun| where bf16 is emulated)?"
                     r"(?: before torch (?P<before>\d+\.\d+))?:"
                     r"\s*(?P<slugs>[a-z0-9-]+(?:,\s*[a-z0-9-]+)*)")


@dataclass
class Expected:
    lines: dict[str, set[int]] = field(default_factory=dict)  # slug -> lines it must point at
    anywhere: set[str] = field(default_factory=set)
    on_cuda: set[str] = field(default_factory=set)
    under_torchrun: set[str] = field(default_factory=set)
    before_torch: dict[str, tuple[int, int]] = field(default_factory=dict)  # slug -> first release it is silent on
    emulated_bf16: set[str] = field(default_factory=set)  # fire only where the CPU has no native bf16
    nothing: bool = False

    @property
    def fires(self) -> set[str]:
        """Every rule that fires on the sample's own (CPU) evidence, on some PyTorch release."""
        return set(self.lines) | self.anywhere

    def fires_for(self, evidence) -> set[str]:
        """The rules that fire on this evidence: its PyTorch release, and whether its CPU runs bf16 natively."""
        native = evidence.env is not None and evidence.env.cpu_native_bf16
        return {slug for slug in self.fires_with(evidence.env.torch_version if evidence.env else "")
                if slug not in self.emulated_bf16 or not native}

    def fires_with(self, torch_version: str) -> set[str]:
        """The rules that fire on the sample's (CPU) evidence gathered with this PyTorch release."""
        release = tuple(int(part) for part in re.findall(r"\d+", torch_version)[:2])
        return {slug for slug in self.fires if slug not in self.before_torch or release < self.before_torch[slug]}


def expected(path: Path) -> Expected:
    found = Expected()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip() == "# expect nothing":
            found.nothing = True
        for match in _EXPECT.finditer(line):
            slugs = [s.strip() for s in match.group("slugs").split(",")]
            where = (match.group("where") or "").strip()
            if match.group("before"):
                bound = tuple(int(part) for part in match.group("before").split("."))
                found.before_torch.update(dict.fromkeys(slugs, bound))
            if where == "anywhere":
                found.anywhere.update(slugs)
            elif where == "on cuda":
                found.on_cuda.update(slugs)
            elif where == "under torchrun":
                found.under_torchrun.update(slugs)
            else:
                if where == "where bf16 is emulated":
                    found.emulated_bf16.update(slugs)
                for slug in slugs:
                    found.lines.setdefault(slug, set()).add(number)
    return found


def annotated_samples() -> dict[str, Expected]:
    """Every model-file sample and what it expects."""
    return {path.stem: expected(path) for path in sorted((ROOT / "samples").glob("*.py"))}


def annotated_scripts() -> dict[str, Expected]:
    return {path.stem: expected(path) for path in sorted((ROOT / "samples" / "scripts").glob("*.py"))}


def as_device(evidence, device: str, **env):
    """The same captured evidence, recorded as if it came from another device (and environment). A GPU is
    named as one: on a CPU run the device name is the CPU's, and "AMD EPYC" would read as an AMD GPU."""
    if device.startswith("cuda"):
        env.setdefault("device_name", "NVIDIA GPU")
    return evidence.model_copy(update={
        "target": evidence.target.model_copy(update={"device": device}),
        "env": evidence.env.model_copy(update=env),
    })


def as_cuda(evidence, **env):
    """The same captured evidence, recorded as if the device had been an A100 (GPU-only rules)."""
    return as_device(evidence, "cuda:0", **{"device_name": "NVIDIA A100-SXM4-80GB", "gpu_capability": (8, 0),
                                            "gpu_count": 1, **env})
