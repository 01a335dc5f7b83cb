"""The loop's wait for data, inside the script's process: every DataLoader the script iterates is
remembered (the loader rules describe it), and each ``next()`` on its iterator is timed, so that a step's
time can leave out the wait for its batch and the data rules can judge the wait on its own."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from advisor.script.window import StepWindow


def watch_loaders(window: StepWindow) -> None:
    from torch.utils.data import dataloader

    original_next = dataloader._BaseDataLoaderIter.__next__
    original_iter = dataloader.DataLoader.__iter__

    def recorded_iter(loader):
        if os.getpid() == window.owner:
            window.loaders[id(loader)] = loader
        return original_iter(loader)
    dataloader.DataLoader.__iter__ = recorded_iter

    def timed_next(iterator):
        began = time.perf_counter()
        try:
            return original_next(iterator)
        finally:
            window.waiting += time.perf_counter() - began
    dataloader._BaseDataLoaderIter.__next__ = timed_next
