"""What the loaded target is: model class, parameters, inputs, optimizer (the load stage's result)."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

from advisor.evidence import TargetInfo
from advisor.workload.feed import describe
from advisor.workload.target import Target, batch_size, describe_inputs


def describe_target(target: Target) -> TargetInfo:
    """The TargetInfo of a loaded target (its user objects are read, never changed)."""
    info = TargetInfo(model_file=target.path, mode=target.mode, device=str(target.device),
                      input_summary=describe_inputs(target.inputs), batch_size=batch_size(target.inputs),
                      has_dataloader=target.get_dataloader is not None)
    describe_model(info, target.model)
    source = target.prepare_feed()
    info.input_source, info.input_note = source.source, source.note
    if source.source == "loader":
        info.batch_summary = describe(source.pairs[0][1])
    if target.mode == "train" and target.get_optimizer is not None:
        made: list = []
        with optimizers_made(made):
            _, _, optimizer = target.fresh()
        describe_optimizer(info, optimizer)
        if made and made[-1] is not None:
            from advisor.evidence import Location

            info.optimizer_call = Location.at(*made[-1], note="where the optimizer is created")
    return info


@contextlib.contextmanager
def optimizers_made(sites: list) -> Iterator[None]:
    """The user's line of each optimizer created inside (get_optimizer's constructor call), appended to ``sites``."""
    from advisor.sources import user_frame

    created = torch.optim.Optimizer.__init__

    def init(optimizer, *args, **kwargs):
        sites.append(user_frame(2))
        created(optimizer, *args, **kwargs)
    torch.optim.Optimizer.__init__ = init
    try:
        yield
    finally:
        torch.optim.Optimizer.__init__ = created


def describe_model(info: TargetInfo, model: torch.nn.Module) -> None:
    """Class, parameter count and dtypes, training flag and module census of ``model``, into ``info``."""
    dtypes: dict[str, int] = {}
    for parameter in model.parameters():
        key = str(parameter.dtype).replace("torch.", "")
        dtypes[key] = dtypes.get(key, 0) + parameter.numel()
    info.model_class = type(model).__qualname__
    info.training_flag = model.training
    info.param_count, info.param_dtypes = sum(dtypes.values()), dtypes
    for module in model.modules():
        name = type(module).__qualname__
        info.module_types[name] = info.module_types.get(name, 0) + 1
    info.checkpointing_switch = checkpointing_switch(model)


def checkpointing_switch(model: torch.nn.Module) -> str:
    """The call that turns on the model's own activation checkpointing, where its library gives it one."""
    if getattr(model, "supports_gradient_checkpointing", False) and callable(getattr(model, "gradient_checkpointing_enable", None)):
        return 'model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})'  # transformers
    if callable(getattr(model, "set_grad_checkpointing", None)):
        return "model.set_grad_checkpointing(True)"  # timm
    return ""


def describe_optimizer(info: TargetInfo, optimizer: Any) -> None:
    info.optimizer = type(optimizer).__name__
    info.optimizer_param_tensors = sum(len(group["params"]) for group in optimizer.param_groups)
    info.optimizer_options = {k: v for k, v in optimizer.defaults.items() if isinstance(v, (bool, int, float, str, type(None)))}
