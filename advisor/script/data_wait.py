"""The loop's wait for data, inside the script's process: every DataLoader the script iterates is
remembered (the loader rules describe it), and each ``next()`` on its iterator is timed, so that a step's
time can leave out the wait for its batch and the data rules can judge the wait on its own."""

from __future__ import annotations

import time

from advisor.script.window_state import WindowState


def watch_loaders(state: WindowState) -> None:
    from torch.utils.data import dataloader

    original_next = dataloader._BaseDataLoaderIter.__next__
    original_iter = dataloader.DataLoader.__iter__

    def recorded_iter(loader):
        if state.mine:
            state.loaders[id(loader)] = loader
        return original_iter(loader)
    dataloader.DataLoader.__iter__ = recorded_iter

    def timed_next(iterator):
        began = time.perf_counter()
        try:
            return original_next(iterator)
        finally:
            state.waiting += time.perf_counter() - began
    dataloader._BaseDataLoaderIter.__next__ = timed_next
