"""The model-file protocol: load a user's ``model.py``, validate it, hand out fresh copies.

    def get_model() -> torch.nn.Module                 # required
    def get_inputs()                                   # the model's inputs: Tensor, tuple (-> *args) or
                                                       # dict (-> **kwargs); required without a loader
    def get_dataloader()                               # optional: the step runs on its real batches
    def inputs_from_batch(batch)                       # optional: the model's inputs within a loader batch
                                                       # (default: batch[0] of a tuple/list, else the batch)
    def get_optimizer(model) -> torch.optim.Optimizer  # optional: enables the training-step audit
    def loss_fn(output, batch) -> torch.Tensor         # optional (default: output.float().mean());
                                                       # batch is the whole loader batch, or get_inputs()

Runs inside the supervised child process: everything here executes user code.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import sys
import threading
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable

import torch
from torch.utils._pytree import tree_flatten, tree_map

from advisor.errors import AuditError, StageError, from_exception
from advisor.workload.feed import BATCHES_AHEAD, INPUTS_HOOK, Feed, FeedSource, default_inputs, describe, from_loader, on_device
from advisor.workload.loader_site import watch_loader_sites
from advisor.workload.model_copy import model_copy

MODES = ("train", "inference")
FETCH_DEADLINE_S = 60.0  # the loader's first batches must come within this (the spec may set less)


def _fail(stage: str, message: str, kind: str = "user-code") -> AuditError:
    return AuditError(StageError(stage=stage, kind=kind, message=message))


def load_module(path: str) -> ModuleType:
    """Import the model file under a private name; errors name the file and line."""
    path = os.path.abspath(path)
    directory = os.path.dirname(path)
    if directory not in sys.path:
        sys.path.insert(0, directory)  # model files import their neighbours
    name = "advisor_user_model_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise _fail("load", "cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SystemExit as exit_request:
        raise AuditError(StageError(
            stage="load", kind="user-code", message=f"the file called sys.exit({exit_request.code!r}) on import",
            **_location_fields(exit_request, path),
        )) from None
    except BaseException as exc:  # noqa: BLE001 - user code may raise anything
        raise AuditError(from_exception("load", exc, path, doing="importing the file")) from None
    return module


def _location_fields(exc: BaseException, path: str) -> dict[str, Any]:
    error = from_exception("load", exc, path)
    return {"file": error.file, "line": error.line, "code": error.code}


def call_user(stage: str, path: str, what: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Run one protocol function, turning any exception into a located StageError."""
    try:
        return fn(*args)
    except SystemExit as exit_request:
        raise AuditError(StageError(
            stage=stage, kind="user-code", message=f"{what} called sys.exit({exit_request.code!r})",
            **_location_fields(exit_request, path),
        )) from None
    except BaseException as exc:  # noqa: BLE001
        raise AuditError(from_exception(stage, exc, path, doing=what)) from None


def resolve_device(requested: str) -> torch.device:
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise _fail("load", "--device cuda was asked for, but PyTorch sees no CUDA device here", "unsupported")
    try:
        return torch.device(requested)
    except RuntimeError:
        raise _fail("load", f"--device {requested!r} is not a device PyTorch knows", "unsupported") from None


@dataclass
class Target:
    """A loaded model file: the user's objects, never modified; work on ``fresh()`` copies."""

    path: str
    module: ModuleType | None
    model: torch.nn.Module
    inputs: Any
    mode: str
    device: torch.device
    get_dataloader: Callable[[], Any] | None = None
    get_optimizer: Callable[[torch.nn.Module], Any] | None = None
    loss_fn: Callable[[Any, Any], torch.Tensor] | None = None
    inputs_from_batch: Callable[[Any], Any] | None = None
    feed_source: FeedSource | None = None  # set by prepare_feed(): what the step runs on
    # Changes a fix may ask for; fresh() and the step apply them to copies, never to the user's objects.
    autocast_dtype: torch.dtype | None = None
    grad_scaler: bool = False
    compile_mode: str | None = None  # torch.compile mode ("default", "reduce-overhead", ...)
    compile_backend: Any = None  # a torch.compile backend, e.g. a graph rewrite
    channels_last: bool = False
    float32_inputs: bool = False  # the feed's floating tensors of other widths (inputs and batch) cast to float32
    loader_options: dict[str, Any] = field(default_factory=dict)  # DataLoader keyword overrides
    detect_anomaly: bool | None = None  # override torch.autograd anomaly mode in the step (None: as set)
    model_transforms: tuple[Callable[[torch.nn.Module], None], ...] = ()  # applied to each fresh copy
    step_contexts: tuple[Callable[[], Any], ...] = ()  # context managers entered around each step (flags)
    optimizer_options: dict[str, Any] = field(default_factory=dict)  # overrides for every param group
    # DistributedDataParallel (advisor run under torchrun; a model file runs one process, without DDP):
    ddp_options: dict[str, Any] = field(default_factory=dict)  # keyword overrides when the script builds DDP
    ddp_sync_every: int = 0  # all-reduce only on every n-th forward between optimizer steps (no_sync on the rest)

    @property
    def compiled(self) -> bool:
        return self.compile_mode is not None or self.compile_backend is not None

    def prepare_feed(self, deadline_s: float = FETCH_DEADLINE_S) -> FeedSource:
        """Fetch the loader's batches the step will run on (once; user code, stage "load")."""
        if self.feed_source is None:
            self.feed_source = self._fetch_feed(deadline_s)
            self.inputs = self.feed_source.pairs[0][0]
        return self.feed_source

    def _fetch_feed(self, deadline_s: float) -> FeedSource:
        if self.get_dataloader is None:
            return FeedSource(pairs=((self.inputs, self.inputs),), source="get_inputs()")
        loader = call_user("load", self.path, "get_dataloader()", self.get_dataloader)
        batches = _within(deadline_s, lambda: call_user("load", self.path, "fetching the loader's first batches",
                                                        lambda: list(itertools.islice(iter(loader), BATCHES_AHEAD))))
        if batches is None:  # a loader that hangs: the data stage will time out on it and say so
            if self.inputs is not None:
                return FeedSource(pairs=((self.inputs, self.inputs),), source="get_inputs()",
                                  note=f"the loader gave no batch within {deadline_s:g} s, so the step ran on "
                                       "get_inputs()")
            raise _fail("load", f"get_dataloader()'s loader gave no batch within {deadline_s:g} s and the file "
                                "defines no get_inputs(): there is nothing to run the model on", "timeout")
        if not batches:
            if self.inputs is not None:
                return FeedSource(pairs=((self.inputs, self.inputs),), source="get_inputs()",
                                  note="the loader yielded no batch, so the step ran on get_inputs()")
            raise _fail("load", "get_dataloader() yielded no batch and the file defines no get_inputs(): "
                                "there is nothing to run the model on")
        hook = self.inputs_from_batch

        def to_inputs(batch: Any) -> Any:
            if hook is None:
                return default_inputs(batch)
            return call_user("load", self.path, f"{INPUTS_HOOK}(batch) on a {describe(batch)} batch", hook, batch)
        return from_loader(batches, to_inputs, hooked=hook is not None, fallback_inputs=self.inputs)

    def fresh(self) -> tuple[torch.nn.Module, Feed, Any]:
        """A deep copy of the model (``model_copy``: autograd's results it holds, detached) and of the step's data on
        the audit device, plus an optimizer."""
        source = self.prepare_feed()
        model = model_copy(self.model).to(self.device)
        for transform in self.model_transforms:
            transform(model)
        feed = on_device(source.pairs, self.device, to_channels_last if self.channels_last else (lambda v: v))
        if self.float32_inputs:
            feed = Feed(items=tuple((tree_map(_float32, inputs), tree_map(_float32, batch)) for inputs, batch in feed.items))
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)
        optimizer = None
        if self.mode == "train" and self.get_optimizer is not None:
            optimizer = call_user("load", self.path, "get_optimizer(model)", self.get_optimizer, model)
            if not isinstance(optimizer, torch.optim.Optimizer):
                raise _fail("load", f"get_optimizer(model) returned {type(optimizer).__name__}, not a torch.optim.Optimizer")
            if self.optimizer_options:
                optimizer = _reconfigured(optimizer, self.optimizer_options)
        if self.compiled:
            options = {"mode": self.compile_mode} if self.compile_mode not in (None, "default") else {}
            if self.compile_backend is not None:
                options["backend"] = self.compile_backend
            model = torch.compile(model, **options)
        return model, feed, optimizer

    def loader(self) -> Any:
        """The user's data loader, rebuilt with ``loader_options`` when a fix set any."""
        loader = call_user("data", self.path, "get_dataloader()", self.get_dataloader)
        return rebuild_loader(loader, **self.loader_options) if self.loader_options else loader


def _float32(value: Any) -> Any:
    return value.float() if isinstance(value, torch.Tensor) and value.dtype in OTHER_FLOATS else value


OTHER_FLOATS = (torch.float64, torch.bfloat16, torch.float16)


def _within(seconds: float, fetch: Callable[[], Any]) -> Any:
    """``fetch()`` in a daemon thread; None when it has not returned after ``seconds`` (it is left
    blocked: a hung loader must not hang the audit). Its exception is raised here."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = fetch()
        except BaseException as failure:  # noqa: BLE001 - re-raised in the caller's thread
            outcome["error"] = failure
    worker = threading.Thread(target=run, name="advisor-fetch-batches", daemon=True)
    worker.start()
    worker.join(seconds)
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def _reconfigured(optimizer: torch.optim.Optimizer, options: dict[str, Any]) -> torch.optim.Optimizer:
    """The same optimizer class over the same parameter groups, with some options changed."""
    groups = [{**group, **options} for group in optimizer.param_groups]
    return type(optimizer)(groups)


def to_channels_last(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.dim() == 4 and value.is_floating_point():
        return value.contiguous(memory_format=torch.channels_last)
    return value


def rebuild_loader(loader: Any, **overrides: Any) -> Any:
    """The same DataLoader (dataset, sampling, collation) with some settings changed."""
    from torch.utils.data import DataLoader

    if not isinstance(loader, DataLoader):
        raise TypeError(f"{type(loader).__name__} is not a torch DataLoader; its settings cannot be changed here")
    options = dict(
        batch_sampler=loader.batch_sampler, num_workers=loader.num_workers, collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory, timeout=loader.timeout, worker_init_fn=loader.worker_init_fn,
        multiprocessing_context=loader.multiprocessing_context, generator=loader.generator,
        persistent_workers=loader.persistent_workers,
    )
    if loader.num_workers > 0 or overrides.get("num_workers", 0) > 0:
        options["prefetch_factor"] = loader.prefetch_factor or 2
    options.update(overrides)
    return DataLoader(loader.dataset, **single_process_consistent(options))


def single_process_consistent(options: dict[str, Any]) -> dict[str, Any]:
    """DataLoader keywords made valid when they ask for no workers (DataLoader rejects prefetch_factor
    and persistent_workers=True then)."""
    if options.get("num_workers", 0) == 0:
        options.pop("prefetch_factor", None)
        options["persistent_workers"] = False
    return options


OPTIONAL_HOOKS = ("get_inputs", "get_dataloader", INPUTS_HOOK, "get_optimizer", "loss_fn")


def load_target(path: str, mode: str = "auto", device: str = "auto", fetch_deadline_s: float = FETCH_DEADLINE_S) -> Target:
    watch_loader_sites()  # the DataLoader(...) call a loader finding points at
    module = load_module(path)
    if not callable(getattr(module, "get_model", None)):
        raise _fail("load", "the file defines no get_model(); a model file must define get_model() and "
                            "get_inputs() (or get_dataloader(), whose batches then feed the model)")
    optional = {name: getattr(module, name, None) for name in OPTIONAL_HOOKS}
    for name, value in optional.items():
        if value is not None and not callable(value):
            raise _fail("load", f"{name} is defined but is not a function")
    if optional["get_inputs"] is None and optional["get_dataloader"] is None:
        raise _fail("load", "the file defines no get_inputs() and no get_dataloader(): define get_inputs() "
                            "(the model's inputs) or a loader whose batches feed the model")

    model = call_user("load", path, "get_model()", module.get_model)
    if not isinstance(model, torch.nn.Module):
        raise _fail("load", f"get_model() returned {type(model).__name__}, not a torch.nn.Module")
    inputs = None
    if optional["get_inputs"] is not None:
        inputs = check_inputs(call_user("load", path, "get_inputs()", optional["get_inputs"]), "get_inputs() returned")
    if mode == "auto":
        mode = "train" if optional["get_optimizer"] is not None else "inference"
    if mode not in MODES:
        raise _fail("load", f"--mode {mode!r} is not one of train, inference", "unsupported")
    hooks = {name: value for name, value in optional.items() if name != "get_inputs"}
    target = Target(path=os.path.abspath(path), module=module, model=model, inputs=inputs, mode=mode,
                    device=resolve_device(device), **hooks)
    target.prepare_feed(fetch_deadline_s)
    check_inputs(target.inputs, "the model's inputs taken from the loader's batch are"
                 if target.feed_source.source == "loader" else "get_inputs() returned")
    return target


def check_inputs(inputs: Any, what: str) -> Any:
    """``what`` names the inputs with a verb: "get_inputs() returned"."""
    if not isinstance(inputs, (torch.Tensor, tuple, list, dict)):
        raise _fail("load", f"{what} {type(inputs).__name__}; expected a Tensor, "
                            f"a tuple (passed as *args) or a dict (passed as **kwargs)"
                            + (f"; define {INPUTS_HOOK}(batch) to pick them out of a batch" if "loader" in what else ""))
    if isinstance(inputs, dict) and not all(isinstance(k, str) for k in inputs):
        raise _fail("load", f"{what} a dict whose keys are not all strings")
    return inputs


def call_model(model: torch.nn.Module, inputs: Any) -> Any:
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    return model(inputs)


def default_loss(output: Any) -> torch.Tensor:
    """Mean of every floating-point tensor in the output that carries a gradient."""
    leaves = [t for t in tree_flatten(output)[0]
              if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad]
    if not leaves:
        raise _fail("step", "the model's output has no floating-point tensor that requires grad, "
                            "so a training step cannot call backward(); define loss_fn(output, batch)")
    return sum(t.float().mean() for t in leaves)


def describe_inputs(inputs: Any) -> list[str]:
    if isinstance(inputs, dict):
        return [f"{key}: {_describe(value)}" for key, value in inputs.items()]
    if isinstance(inputs, (tuple, list)):
        return [f"arg{i}: {_describe(value)}" for i, value in enumerate(inputs)]
    return [f"input: {_describe(inputs)}"]


def batch_size(inputs: Any) -> int | None:
    leaves = [t for t in tree_flatten(inputs)[0] if isinstance(t, torch.Tensor) and t.dim() > 0]
    return int(leaves[0].shape[0]) if leaves else None


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).replace("torch.", "")
        return f"{dtype}{list(value.shape)} on {value.device}"
    return type(value).__name__
