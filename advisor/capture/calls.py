"""Watched API calls: checkpoints, cache flushes, zero_grad, debugging tools and autocast regions in the user's code.

Two sources, kept apart in the evidence:

* runtime — one step runs under ``sys.setprofile``; every call of a watched function whose
  caller is user code is recorded with its line and selected arguments. This sees only what
  the audited step executes (the forward, the loss, hooks), never code that does not run.
* static — the model file's syntax tree, for calls written in code the step does not run (a
  training loop under ``__main__``) whose text alone is the problem:
  ``zero_grad(set_to_none=False)``.
"""

from __future__ import annotations

import ast
import inspect
import linecache
import os
import sys
import time
from collections import Counter
from typing import Any, Callable

from advisor.evidence import CallSite
from advisor.sources import user_frame_of
from advisor.workload.target import Target


def _watched() -> dict[Any, tuple[str, tuple[str, ...]]]:
    """Code object of each watched function -> (API name, arguments worth keeping)."""
    import torch.autograd.gradcheck
    import torch.autograd.profiler as autograd_profiler
    import torch.profiler

    gradcheck = sys.modules["torch.autograd.gradcheck"]  # the package attribute is the function

    table: dict[Callable[..., Any], tuple[str, tuple[str, ...]]] = {
        torch.save: ("torch.save", ()),
        torch.cuda.empty_cache: ("torch.cuda.empty_cache", ()),
        torch.optim.Optimizer.zero_grad: ("zero_grad", ("set_to_none",)),
        torch.nn.Module.zero_grad: ("zero_grad", ("set_to_none",)),
        gradcheck.gradcheck: ("torch.autograd.gradcheck", ()),
        gradcheck.gradgradcheck: ("torch.autograd.gradgradcheck", ()),
        torch.profiler.profile.__enter__: ("torch.profiler.profile", ()),
        torch.profiler.profile.start: ("torch.profiler.profile", ()),
        autograd_profiler.profile.__enter__: ("torch.autograd.profiler.profile", ()),
        autograd_profiler.emit_nvtx.__enter__: ("torch.autograd.profiler.emit_nvtx", ()),
        torch.cuda.memory._record_memory_history: ("torch.cuda.memory._record_memory_history", ()),
        torch.amp.autocast_mode.autocast.__enter__: ("torch.autocast", ("self.fast_dtype", "self.device", "self._enabled")),
    }
    unwrapped = {inspect.unwrap(function): entry for function, entry in table.items()}  # past _disable_dynamo
    return {function.__code__: entry for function, entry in unwrapped.items() if hasattr(function, "__code__")}


def _kept(local_names: dict, name: str) -> Any:
    """A local of the call, or an attribute of one (``self.fast_dtype``: what an autocast region was made with)."""
    owner, _, attribute = name.partition(".")
    value = local_names.get(owner)
    return getattr(value, attribute, None) if attribute else value


class CallWatcher:
    """While entered, records each watched call made from user code (on this thread): its line,
    count, kept arguments and time. ``sites(path)`` adds the calls found in ``path``'s source."""

    def __init__(self) -> None:
        self.watched = _watched()
        self.counts: Counter[tuple[str, str, int]] = Counter()
        self.seconds: Counter[tuple[str, str, int]] = Counter()
        self.arguments: dict[tuple[str, str, int], dict[str, str]] = {}
        self.running: dict[int, tuple[tuple[str, str, int], float]] = {}
        self.previous = None

    def __enter__(self) -> CallWatcher:
        self.previous = sys.getprofile()
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc) -> bool:
        sys.setprofile(self.previous)
        return False

    def _profile(self, frame, event, arg) -> None:
        watched = self.watched
        if frame.f_code not in watched or event not in ("call", "return"):
            return
        if event == "return":
            if (started := self.running.pop(id(frame), None)) is not None:
                self.seconds[started[0]] += time.perf_counter() - started[1]
            return
        api, keep = watched[frame.f_code]
        if frame.f_back is not None and frame.f_back.f_code in watched:
            return  # profile.__enter__ calling profile.start: one call of the user's
        where = user_frame_of(frame.f_back)
        if where is None:
            return  # torch or advisor calling its own API (the harness's zero_grad): not the user's
        key = (api, *where)
        self.counts[key] += 1
        self.arguments[key] = {name: repr(_kept(frame.f_locals, name)) for name in keep
                               if name.partition(".")[0] in frame.f_locals}
        self.running[id(frame)] = (key, time.perf_counter())

    def sites(self, source_path: str, steps: int = 1) -> list[CallSite]:
        """Per-step figures over the ``steps`` watched, then the calls written in the source."""
        sites = [CallSite(api=api, file=file, line=line, code=linecache.getline(file, line).strip(), runtime=True,
                          count=round(count / steps, 4), arguments=self.arguments.get((api, file, line), {}),
                          ms=round(self.seconds[(api, file, line)] * 1000 / steps, 4), steps_watched=steps)
                 for (api, file, line), count in self.counts.items()]
        seen = {(site.api, site.file, site.line) for site in sites}
        return sites + [site for site in static_sites(source_path) if (site.api, site.file, site.line) not in seen]


def watch_step_calls(target: Target, warm_step: Callable[[], Any] | None = None) -> list[CallSite]:
    """Watched calls made from user code while one step runs (``warm_step``, a step already run, or a fresh
    one run once first), then those found in the source."""
    from advisor.workload.step import make_step, run_user_step

    step = warm_step
    if step is None:
        step = make_step(target, *target.fresh())
        run_user_step("calls", target, step)  # the first step pays lazy initialisation: not the steady state
    with CallWatcher() as watcher:
        run_user_step("calls", target, step)
    return watcher.sites(target.path)


# Calls recognised in the source text, by the last dotted names of the callee. Only calls whose
# arguments alone say they are wrong belong here (a torch.save in a loop may well run once per epoch), and the
# calls that choose a dtype NumPy or the user's casts bring in (slow-precision names them where the step's
# float64 arithmetic is slow): they run in get_model() or get_inputs(), outside the watched step.
_STATIC = {("zero_grad",): "zero_grad", ("from_numpy",): "torch.from_numpy", ("double",): "double",
           ("bfloat16",): "bfloat16", ("half",): "half"}


def static_sites(path: str) -> list[CallSite]:
    """Watched calls written in the model file (anywhere in it: the step may not run them)."""
    try:
        with open(path, encoding="utf-8") as handle:
            source = handle.read()
        tree = ast.parse(source, filename=path)
    except (OSError, SyntaxError, ValueError):
        return []
    lines = source.splitlines()
    found: dict[tuple[str, int], CallSite] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or (api := _static_api(node.func) or _dtype_named(node)) is None:
            continue
        if (api, node.lineno) in found:
            found[(api, node.lineno)].count += 1
            continue
        found[(api, node.lineno)] = CallSite(
            api=api, file=os.path.abspath(path), line=node.lineno,
            code=lines[node.lineno - 1].strip() if node.lineno <= len(lines) else "",
            runtime=False, arguments=_static_arguments(api, node))
    return sorted(found.values(), key=lambda site: site.line)


def _dotted(func: ast.expr) -> tuple[str, ...]:
    parts: list[str] = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    return tuple(reversed(parts))


def _static_api(func: ast.expr) -> str | None:
    names = _dotted(func)
    for suffix, api in _STATIC.items():
        if names[-len(suffix):] == suffix:
            return api
    return None


SLOW_DTYPE_NAMES = {"bfloat16": "bfloat16", "float16": "float16", "half": "float16", "float64": "float64",
                    "double": "float64"}


def _dtype_named(call: ast.Call) -> str | None:
    """A call that names a dtype slow-precision judges: ``.to(torch.bfloat16)`` (a module's or a tensor's cast),
    ``dtype=torch.bfloat16`` (a factory's or a cast's keyword); as ``to(torch.bfloat16)`` or
    ``dtype=torch.bfloat16``, the dtype as torch names it."""
    named = [keyword.value for keyword in call.keywords if keyword.arg == "dtype"]
    is_to = isinstance(call.func, ast.Attribute) and call.func.attr == "to"
    for value in named + (list(call.args) if is_to else []):
        dotted = _dotted(value) if isinstance(value, (ast.Attribute, ast.Name)) else ()
        if len(dotted) == 2 and dotted[0] == "torch" and dotted[1] in SLOW_DTYPE_NAMES:
            dtype = SLOW_DTYPE_NAMES[dotted[1]]
            return f"to(torch.{dtype})" if is_to and value not in named else f"dtype=torch.{dtype}"
    return None


def _static_arguments(api: str, call: ast.Call) -> dict[str, str]:
    if api != "zero_grad":
        return {}
    for keyword in call.keywords:
        if keyword.arg == "set_to_none" and isinstance(keyword.value, ast.Constant):
            return {"set_to_none": repr(keyword.value.value)}
    if call.args and isinstance(call.args[0], ast.Constant):
        return {"set_to_none": repr(call.args[0].value)}
    return {}
