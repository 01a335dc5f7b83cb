"""Mark each torch call the user's code makes with its file and line, inside the profiler trace.

The profiler's Python events name the function (``model.py(5): forward``, its ``def`` line),
not the line that called into torch, and calls that run no operator on the CPU (``.tolist()``,
``.numpy()``) leave no event at all. During advisor's profiling run this mode wraps every
outermost torch call in ``record_function("advisor.src:<api>@<file>:<line>")``; the Kineto
parser attributes the operators inside each span to that line.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from advisor.capture.provenance import HostTensors
from advisor.sources import user_frame
from advisor.trace.parse import HOST_READ, SOURCE_ANNOTATION

# Attribute reads and metadata queries run no operator; annotating them only adds noise.
_QUIET = {
    "__get__", "size", "dim", "shape", "dtype", "device", "is_cuda", "numel", "stride",
    "is_contiguous", "requires_grad", "grad_fn", "data_ptr", "element_size", "ndimension",
    "__len__", "__format__", "__repr__", "__hash__", "is_floating_point", "storage_offset",
}


def api_name(func: Any) -> str:
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or str(func)
    if "<locals>" in name and str(getattr(func, "__module__", "")).startswith("torch"):
        name = f"torch.{func.__name__}"  # torch.unique and the like: made by a factory (boolean_dispatch)
    if name.startswith("_TensorBase.") or name.startswith("TensorBase."):
        name = "Tensor." + name.split(".", 1)[1]
    elif name.startswith("_VariableFunctionsClass."):
        name = "torch." + name.split(".", 1)[1]
    return name


_OPTIMIZER_CODE = os.path.join(os.path.dirname(torch.__file__), "optim") + os.sep


class SourceAnnotator(TorchFunctionMode):
    """Wraps each outermost torch call from user code in a source-line profiler range, and marks the
    reads of host-made tensors (``provenance.py``): no device waits for those."""

    def __init__(self) -> None:
        super().__init__()
        self.host = HostTensors()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = api_name(func)
        if name.rsplit(".", 1)[-1] in _QUIET:
            return func(*args, **kwargs)
        if sys._getframe(1).f_code.co_filename.startswith(_OPTIMIZER_CODE):
            return func(*args, **kwargs)  # an optimizer's own work (Adam's step-count .item()): torch's, not a user call
        where = user_frame(2, library_fallback=True)
        if where is None:
            result = func(*args, **kwargs)
        else:
            read = HOST_READ if self.host.reads_host_tensor(args) else ""
            with torch.profiler.record_function(f"{SOURCE_ANNOTATION}{read}{name}@{where[0]}:{where[1]}"):
                result = func(*args, **kwargs)
        if name == "Tensor.__iter__" and args and args[0] in self.host:
            items = tuple(result)  # the same items, each seen: ``for i in index_tensor``
            self.host.note(name, args, kwargs, items)
            return iter(items)
        self.host.note(name, args, kwargs, result)
        return result
