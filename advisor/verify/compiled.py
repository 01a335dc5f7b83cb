"""What measuring a compiled candidate needs, wherever it runs (audit's child or a run of the script).

``WatchedRewrite`` wraps a graph-rewrite backend and says whether it changed anything (a rewrite
that found nothing is no fix to measure); ``eager_random_in_compiled_code`` makes compiled code
draw random numbers as eager code does (dropout), so outputs compare.
"""

from __future__ import annotations

from typing import Any, Callable

import torch


class WatchedRewrite:
    """A graph-rewrite backend that records whether it changed any graph torch.compile gave it."""

    def __init__(self, backend: Callable[..., Any]):
        self.backend = backend
        self.graphs = 0
        self.changed = 0

    def __call__(self, graph_module: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        before = graph_module.code
        compiled = self.backend(graph_module, example_inputs)
        self.graphs += 1
        self.changed += graph_module.code != before
        return compiled

    def unapplied(self) -> str | None:
        """Why the rewrite was not applied, as a sentence; None when it changed a graph."""
        if self.changed:
            return None
        if not self.graphs:
            return ("torch.compile gave the fix's graph rewrite no graph to change (a forward Dynamo cannot "
                    "trace, such as one under torch.compiler.disable, runs as it is)")
        said = self.described()
        return (f"the fix's graph rewrite found nothing to change in the {self.graphs} graph(s) torch.compile captured"
                + (f": {said}" if said else ""))

    def described(self) -> str:
        describe = getattr(self.backend, "describe", None)
        return describe() if callable(describe) else ""


class eager_random_in_compiled_code:
    """Make compiled code draw random numbers like eager code (dropout), so outputs compare."""

    def __enter__(self):
        try:
            import torch._inductor.config as inductor_config
        except ImportError:
            self._config = None
            return self
        self._config = inductor_config
        self._saved = inductor_config.fallback_random
        inductor_config.fallback_random = True
        return self

    def __exit__(self, *exc):
        if self._config is not None:
            self._config.fallback_random = self._saved
        return False
