"""What the loaded target is: model class, parameters, inputs, optimizer (the load stage's result)."""

from __future__ import annotations

from advisor.evidence import TargetInfo
from advisor.feed import describe
from advisor.target import Target, batch_size, describe_inputs


def describe_target(target: Target) -> TargetInfo:
    """The TargetInfo of a loaded target (its user objects are read, never changed)."""
    dtypes: dict[str, int] = {}
    for parameter in target.model.parameters():
        key = str(parameter.dtype).replace("torch.", "")
        dtypes[key] = dtypes.get(key, 0) + parameter.numel()
    info = TargetInfo(
        model_file=target.path, model_class=type(target.model).__qualname__, mode=target.mode,
        device=str(target.device), training_flag=target.model.training,
        param_count=sum(dtypes.values()), param_dtypes=dtypes,
        input_summary=describe_inputs(target.inputs), batch_size=batch_size(target.inputs),
        has_dataloader=target.get_dataloader is not None,
    )
    source = target.prepare_feed()
    info.input_source, info.input_note = source.source, source.note
    if source.source == "loader":
        info.batch_summary = describe(source.pairs[0][1])
    for module in target.model.modules():
        name = type(module).__qualname__
        info.module_types[name] = info.module_types.get(name, 0) + 1
    if target.mode == "train" and target.get_optimizer is not None:
        _, _, optimizer = target.fresh()
        info.optimizer = type(optimizer).__name__
        info.optimizer_param_tensors = sum(len(group["params"]) for group in optimizer.param_groups)
        info.optimizer_options = {k: v for k, v in optimizer.defaults.items() if isinstance(v, (bool, int, float, str, type(None)))}
    return info
