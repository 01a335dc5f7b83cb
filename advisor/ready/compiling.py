"""compile and recompiles evidence: graph breaks of a full-graph compile, and the recompilations
one compiled model makes across the batch sizes, each with the guard that failed and whose it is."""

from __future__ import annotations

import copy
import logging
import re
import time
from typing import Any, Callable

import torch

from advisor.capture.graph import capture_graph
from advisor.evidence import Location
from advisor.ready.measured import Blocker, CompileEvidence, Recompile, RecompileEvidence
from advisor.ready.places import first_line, named_in
from advisor.workload.target import call_model

_GUARD_FAILURE = re.compile(r"^\s*- \d+/\d+: (?P<guard>.+)$")
# a size's lower bound of 2 alone is Dynamo's own 0/1 specialisation, whatever line first used the size
_SPECIALISATION_ONLY = re.compile(r"^2 <= [^<>=]+$")
RECOMPILE_LOGGER = "torch._dynamo"  # its "recompiles" artifact (torch._dynamo.guards.__recompiles) stops there


def measure_compile(model: torch.nn.Module, inputs: Any) -> CompileEvidence:
    try:
        capture = capture_graph(copy.deepcopy(model), inputs)
    except Exception as failure:  # noqa: BLE001 - Dynamo raises many types
        return CompileEvidence(error=f"{type(failure).__name__}: {first_line(failure)}")
    breaks = [Blocker(message=b.reason + (f" ({b.count} times)" if b.count > 1 else ""),
                      location=Location.at(b.file, b.line) if b.file else None) for b in capture.breaks]
    return CompileEvidence(fullgraph=not breaks, graphs=capture.graph_count, breaks=breaks)


class _Recorded(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.lstrip().startswith("Recompiling function"):
            self.messages.append(message)


def measure_recompiles(model: torch.nn.Module, batch_of: Callable[[int], Any], sizes: list[int],
                       model_file: str) -> RecompileEvidence:
    """One ``torch.compile(model)`` called at each batch size in turn, as a server would."""
    import torch._dynamo as dynamo

    evidence = RecompileEvidence(batch_sizes=sizes)
    recorded = _Recorded()
    logger = logging.getLogger(RECOMPILE_LOGGER)
    dynamo.reset()
    torch._logging.set_logs(recompiles=True)
    logger.addHandler(recorded)
    compiled = torch.compile(copy.deepcopy(model))
    try:
        with torch.no_grad():
            for size in sizes:
                before = len(recorded.messages)
                began = time.perf_counter()
                try:
                    call_model(compiled, batch_of(size))
                except Exception as failure:  # noqa: BLE001 - a batch size the model cannot run: latency says so
                    evidence.error = f"batch size {size}: {type(failure).__name__}: {first_line(failure)}"
                    continue
                if evidence.compile_s is None:
                    evidence.compile_s = round(time.perf_counter() - began, 3)
                for message in recorded.messages[before:]:
                    evidence.recompiles.append(_recompile(size, message, model_file))
    finally:
        logger.removeHandler(recorded)
        torch._logging.set_logs()
        evidence.graphs = len(evidence.recompiles) + (1 if evidence.compile_s is not None else 0)
        dynamo.reset()
    return evidence


def _recompile(size: int, message: str, model_file: str) -> Recompile:
    """A guard that names a line of the user's code is the user's (a size baked into a reshape, a branch
    on a size); a plain size mismatch is Dynamo's own static-to-dynamic and size-1 specialisation."""
    guards = [m.group("guard").strip() for line in message.splitlines() if (m := _GUARD_FAILURE.match(line))]
    places = named_in(message, model_file)
    users = [g for g in guards if named_in(g, model_file) and not _SPECIALISATION_ONLY.match(g.split("  #")[0].strip())]
    reason = users[0] if users else (guards[0] if guards else first_line(message))
    return Recompile(batch_size=size, reason=reason.split("  #")[0].strip(), from_user_code=bool(users),
                     location=places[0] if users and places else None)
