"""Python's file functions, routed through the installed file layer.

``open`` (builtins and io), ``os.open``, the ``os`` functions that stat, list, create, remove,
rename, link and change files (``os.makedirs``, ``os.removedirs``, ``pathlib``, ``tempfile``,
``shutil``'s copies and moves are built on them), ``shutil.rmtree``; and, through ``native``, the
programs a run starts and the native code that opens files by name. Each call is handed to the
layer with its path made canonical (``intercept``).
"""

from __future__ import annotations

import builtins
import io
import os
import shutil
import sys

from advisor.files import intercept, native
from advisor.files.gate import GATE
from advisor.files.intercept import call_with, layer_call, patch, reading, routing_again, user_error, user_path
from advisor.files.listing import Entry, Listing

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


# --- open ----------------------------------------------------------------------------------------
def _intent(mode: str) -> tuple[bool, bool] | None:
    """(keep the content, exclusive) for a mode that writes; None for a read."""
    if not any(letter in mode for letter in "wxa+"):
        return None
    keep = "a" in mode or ("+" in mode and "w" not in mode and "x" not in mode)
    return keep, "x" in mode


def _open(original, file, mode="r", *args, **kwargs):
    intent = _intent(mode) if isinstance(mode, str) else None
    if kwargs.get("opener") is not None:  # the opener names the file (tempfile's): its os.open is routed
        with routing_again():
            handle = original(file, mode, *args, **kwargs)
        if intent is not None:
            GATE.register(handle)
        return handle
    path = user_path(file) if intent is not None or intercept.LAYER.routes_reads else None
    if path is None:
        handle = original(file, mode, *args, **kwargs)
    else:
        if intent is None:
            redirected = layer_call(path, lambda: intercept.LAYER.for_read(path.canonical))
        else:
            redirected = layer_call(path, lambda: intercept.LAYER.for_write(path.canonical, *intent))
        handle = call_with(original, path, redirected, (mode, *args), kwargs)
        if intent is not None:
            intercept.LAYER.opened(path.canonical, redirected, handle)
    if intent is not None:
        GATE.register(handle)
    return handle


def _os_open(original, file, flags, mode=0o777, *, dir_fd=None):
    unnamed = hasattr(os, "O_TMPFILE") and (flags & os.O_TMPFILE) == os.O_TMPFILE  # no name: nothing to keep
    path = user_path(file, dir_fd) if not unnamed and (flags & WRITE_FLAGS or intercept.LAYER.routes_reads) else None
    if path is None:
        return original(file, flags, mode, dir_fd=dir_fd)
    if flags & WRITE_FLAGS:
        keep, exclusive = not flags & os.O_TRUNC, bool(flags & os.O_CREAT and flags & os.O_EXCL)
        redirected = layer_call(path, lambda: intercept.LAYER.for_write(path.canonical, keep, exclusive))
    else:
        redirected = layer_call(path, lambda: intercept.LAYER.for_read(path.canonical))
    return call_with(original, path, redirected, (flags, mode), {"dir_fd": dir_fd})


# --- reads and metadata ---------------------------------------------------------------------------
def _access(original, file, *args, **kwargs):
    try:
        return reading(original, file, *args, **kwargs)
    except FileNotFoundError:
        return False


def _changing(original, file, *args, **kwargs):
    """chmod, utime, truncate, chown, xattrs: a change of the file in place."""
    path = user_path(file, kwargs.get("dir_fd"))
    if path is None:
        return original(file, *args, **kwargs)
    redirected = layer_call(path, lambda: intercept.LAYER.for_write(path.canonical, True, False))
    return call_with(original, path, redirected, args, kwargs)


def _listing(scan: bool):
    """os.listdir / os.scandir: the folder as the shadow shows it, where it differs from the disk's."""
    def handler(original, file="."):
        path = user_path(file) if intercept.LAYER.routes_reads else None
        names = layer_call(path, lambda: intercept.LAYER.listdir(path.canonical)) if path is not None else None
        if names is None:
            return original(file)
        if not scan:
            return [path.as_given(name) for name in names]
        return Listing([Entry(path.as_given(name), path.as_given(os.path.join(path.given, name)),
                              os.path.join(path.canonical, name)) for name in names])
    return handler


# --- changes of the tree ------------------------------------------------------------------------
def _performed(operation: str):
    """remove, unlink, rmdir: the layer does it (or journals it and runs the call)."""
    def handler(original, file, *, dir_fd=None):
        path = user_path(file, dir_fd)
        if path is None:
            return original(file, dir_fd=dir_fd)
        layer_call(path, lambda: getattr(intercept.LAYER, operation)(path.canonical, lambda: original(file, dir_fd=dir_fd)))
        intercept.LAYER.scope.forget()
    return handler


def _mkdir(original, file, mode=0o777, *, dir_fd=None):
    path = user_path(file, dir_fd)
    if path is None:
        return original(file, mode, dir_fd=dir_fd)
    layer_call(path, lambda: intercept.LAYER.mkdir(path.canonical, mode, lambda: original(file, mode, dir_fd=dir_fd)))
    intercept.LAYER.scope.forget()


def _rename(original, src, dst, *, src_dir_fd=None, dst_dir_fd=None):
    source, destination = user_path(src, src_dir_fd), user_path(dst, dst_dir_fd)

    def run():
        return original(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
    if source is None and destination is None:
        return run()
    if source is not None and destination is not None:
        try:
            intercept.LAYER.rename(source.canonical, destination.canonical, run)
        except OSError as error:
            raise user_error(user_error(error, source), destination) from None
    elif destination is not None:
        outside = os.path.abspath(os.fsdecode(os.fspath(src)))
        layer_call(destination, lambda: intercept.LAYER.adopt(outside, destination.canonical, run))
    else:
        outside = os.path.abspath(os.fsdecode(os.fspath(dst)))
        layer_call(source, lambda: intercept.LAYER.release(source.canonical, outside, run))
    intercept.LAYER.scope.forget()


def _link(original, src, dst, *args, **kwargs):
    destination = user_path(dst, kwargs.get("dst_dir_fd"))
    if destination is None:
        return original(src, dst, *args, **kwargs)
    source = os.path.abspath(os.fsdecode(os.fspath(src)))
    layer_call(destination, lambda: intercept.LAYER.link(source, destination.canonical, lambda: original(src, dst, *args, **kwargs)))


def _symlink(original, src, dst, *args, **kwargs):
    destination = user_path(dst, kwargs.get("dir_fd"))
    if destination is None:
        return original(src, dst, *args, **kwargs)
    pointed = os.fsdecode(os.fspath(src))
    layer_call(destination, lambda: intercept.LAYER.symlink(pointed, destination.canonical,
                                                   lambda: original(src, dst, *args, **kwargs)))
    intercept.LAYER.scope.forget()


def _rmtree(original, file, *args, **kwargs):
    path = user_path(file, kwargs.get("dir_fd"))
    if path is None:
        return original(file, *args, **kwargs)
    ignore_errors = args[0] if args else kwargs.get("ignore_errors", False)
    try:
        layer_call(path, lambda: intercept.LAYER.rmtree(path.canonical, lambda: original(file, *args, **kwargs)))
    except OSError as error:
        onexc, onerror = kwargs.get("onexc"), kwargs.get("onerror") or (args[1] if len(args) > 1 else None)
        if ignore_errors:
            return
        if onexc is not None:
            onexc(os.rmdir, path.given, error)
        elif onerror is not None:
            onerror(os.rmdir, path.given, sys.exc_info())
        else:
            raise
    intercept.LAYER.scope.forget()


# --- installing ------------------------------------------------------------------------------------
READS = ("stat", "lstat", "readlink", "listxattr", "getxattr")
CHANGES = ("chmod", "chown", "utime", "truncate", "setxattr", "removexattr")


def install(layer) -> None:
    """Route this process's file functions through ``layer``, once, before the script runs."""
    if intercept.LAYER is not None:
        return
    intercept.LAYER = layer
    patch(io, "open", _open)
    builtins.open = io.open
    for name in READS:
        if hasattr(os, name):
            patch(os, name, reading)
    for name in CHANGES:
        if hasattr(os, name):
            patch(os, name, _changing)
    for name, handler in (("access", _access), ("open", _os_open), ("listdir", _listing(scan=False)),
                          ("scandir", _listing(scan=True)),
                          ("mkdir", _mkdir), ("remove", _performed("remove")), ("unlink", _performed("remove")),
                          ("rmdir", _performed("rmdir")), ("rename", _rename), ("replace", _rename),
                          ("link", _link), ("symlink", _symlink)):
        patch(os, name, handler)
    patch(shutil, "rmtree", _rmtree)
    native.install()
    layer.note_event("installed", argv=list(getattr(sys, "orig_argv", sys.argv)))
