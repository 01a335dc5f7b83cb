"""Where the user's code built each DataLoader: the ``DataLoader(...)`` call whose settings a loader
finding changes (workers, pinning), which is not where the time goes (the dataset's ``__getitem__``).

Watched from before the user's code builds its loaders (the model file's ``get_dataloader()``, the
script's step window) to the end of the process; the loader itself is left as it was made.
"""

from __future__ import annotations

import functools
import sys
import weakref
from typing import Any

from advisor.sources import user_frame_of

_SITES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_WATCHING = False


def watch_loader_sites() -> None:
    global _WATCHING
    if _WATCHING:
        return
    from torch.utils.data import DataLoader

    made = DataLoader.__init__

    @functools.wraps(made)
    def init(loader, *args, **kwargs):
        made(loader, *args, **kwargs)
        where = user_frame_of(sys._getframe(1))
        if where is not None and loader not in _SITES:
            _SITES[loader] = where  # a subclass's super().__init__: the outer call came first
    DataLoader.__init__ = init
    _WATCHING = True


def site_of(loader: Any) -> tuple[str, int] | None:
    try:
        return _SITES.get(loader)
    except TypeError:  # not weak-referenceable: never watched
        return None
