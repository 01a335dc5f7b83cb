"""The mechanism that routes a process's file functions through its file layer (journal or shadow).

``routed(original, handler)`` wraps one function: the handler gets the call with the user's path made
canonical (``user_path``), hands it to ``LAYER``, and calls the original on the path the layer
chose (``call_with``), with errors naming the user's path, never the shadow's (``user_error``).
advisor's own calls (``suspended``), descriptors and paths outside the layer's scope go straight
through.
"""

from __future__ import annotations

import functools
import os
import threading
from contextlib import contextmanager
from typing import Any, Callable

LAYER: Any = None  # the Journal or the Shadow of this process

_state = threading.local()


@contextmanager
def suspended():
    """advisor's own file work in this thread: straight to the disk, never journaled or shadowed."""
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        yield
    finally:
        _state.depth -= 1


@contextmanager
def routing_again():
    """Inside a handler, user code that opens files itself (an ``opener``) is routed like any caller."""
    depth = _state.depth
    _state.depth = 0
    try:
        yield
    finally:
        _state.depth = depth


def routed(original: Callable, handler: Callable) -> Callable:
    """``original`` through ``handler``; known to ``os.supports_*`` as the original is (shutil asks)."""
    @functools.wraps(original)
    def call(*args, **kwargs):
        if LAYER is None or getattr(_state, "depth", 0):
            return original(*args, **kwargs)
        _state.depth = getattr(_state, "depth", 0) + 1
        try:
            return handler(original, *args, **kwargs)
        finally:
            _state.depth -= 1
    call.__advisor_original__ = original
    for supports in ("supports_dir_fd", "supports_fd", "supports_follow_symlinks", "supports_effective_ids"):
        known = getattr(os, supports, None)
        if known is not None and original in known:
            known.add(call)
    return call


def patch(owner: Any, name: str, handler: Callable) -> None:
    """Route ``owner.name`` through ``handler``. The routed function carries the name it is found under,
    so it pickles as the original does (``pool.map(os.remove, paths)``)."""
    call = routed(getattr(owner, name), handler)
    if not isinstance(owner, type):
        call.__module__ = owner.__name__
    setattr(owner, name, call)


class _Path:
    """A path argument: as the user gave it, and canonical."""

    __slots__ = ("value", "given", "canonical")

    def __init__(self, value: Any, given: str, canonical: str):
        self.value, self.given, self.canonical = value, given, canonical

    def as_given(self, path: str) -> Any:
        return os.fsencode(path) if isinstance(self.value, bytes) else path


def user_path(value: Any, dir_fd: int | None = None) -> _Path | None:
    """The user's file behind an argument, or None (a descriptor, not a path, outside the scope)."""
    if isinstance(value, int):
        return None
    try:
        given = os.fspath(value)
    except TypeError:
        return None
    if isinstance(given, bytes):
        given = os.fsdecode(given)
    try:
        canonical = LAYER.scope.canonical(given, dir_fd)
    except OSError:
        LAYER.note_event("unseen", path=given, why="relative to a descriptor whose folder advisor cannot read back")
        return None
    return _Path(value, given, canonical) if LAYER.scope.contains(canonical) else None


def user_error(error: OSError, path: _Path, redirected: str | None = None) -> OSError:
    """The error as the user's call would have raised it: naming their path, not the shadow's."""
    for attribute in ("filename", "filename2"):
        named = getattr(error, attribute, None)
        if named is not None and named in (path.canonical, redirected):
            setattr(error, attribute, path.given)
    return error


def layer_call(path: _Path, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except OSError as error:
        raise user_error(error, path) from None


def call_with(original: Callable, path: _Path, redirected: str | None, args: tuple, kwargs: dict) -> Any:
    """``original`` on the redirected path (None: the user's own arguments)."""
    if redirected is None:
        return original(path.value, *args, **kwargs)
    kwargs = {key: value for key, value in kwargs.items() if key != "dir_fd"}  # the redirected path is absolute
    try:
        return original(path.as_given(redirected), *args, **kwargs)
    except OSError as error:
        raise user_error(error, path, redirected) from None


def reading(original, file, *args, **kwargs):
    path = user_path(file, kwargs.get("dir_fd")) if LAYER.routes_reads else None
    if path is None:
        return original(file, *args, **kwargs)
    return call_with(original, path, layer_call(path, lambda: LAYER.for_read(path.canonical)), args, kwargs)
