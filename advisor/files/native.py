"""What a run does beyond Python's file functions: programs it starts (recorded, not routed) and the
native code that opens files by name (torch.save/load, sqlite3, safetensors), routed once imported."""

from __future__ import annotations

import os
import subprocess
from typing import Any

from advisor.files import intercept
from advisor.files.gate import GATE
from advisor.files.imports import when_imported
from advisor.files.intercept import call_with, layer_call, patch, reading, user_error, user_path


def _execute_child(original, self, args, *rest, **kwargs):
    result = original(self, args, *rest, **kwargs)
    intercept.LAYER.note_event("subprocess", argv=_argv(args), child=self.pid)
    return result


def _started(kind: str):
    """os.system(command), os.execv(path, argv), os.posix_spawn(path, argv, env)."""
    def handler(original, *args, **kwargs):
        command = args[0] if kind == "system" or len(args) < 2 else args[1]
        intercept.LAYER.note_event("subprocess", argv=_argv(command), child=None, how=kind)
        return original(*args, **kwargs)
    return handler


def _argv(args: Any) -> list[str]:
    if isinstance(args, (str, bytes, os.PathLike)):
        return [os.fsdecode(os.fspath(args))]
    try:
        return [os.fsdecode(os.fspath(a)) if isinstance(a, (str, bytes, os.PathLike)) else str(a) for a in args]
    except TypeError:
        return [str(args)]


# --- native code that opens files by name -----------------------------------------------------------
def _named_write(original, payload, file, *args, **kwargs):
    """torch.save, safetensors' save_file: a write by name the stop waits for."""
    with GATE.operation():
        path = user_path(file)
        if path is None:
            return original(payload, file, *args, **kwargs)
        redirected = layer_call(path, lambda: intercept.LAYER.for_write(path.canonical, False, False))
        if redirected is None:
            return original(payload, file, *args, **kwargs)
        try:
            return original(payload, path.as_given(redirected), *args, **kwargs)
        except OSError as error:
            raise user_error(error, path, redirected) from None


def _sqlite_connect(original, database, *args, **kwargs):
    path = None if kwargs.get("uri") or database in (":memory:", b":memory:", "") else user_path(database)
    if path is None:
        return original(database, *args, **kwargs)
    redirected = layer_call(path, lambda: intercept.LAYER.for_write(path.canonical, True, False))
    for suffix in ("-journal", "-wal", "-shm"):  # the database's own files travel with it
        sibling = path.canonical + suffix
        if os.path.lexists(sibling) or (redirected and os.path.lexists(intercept.LAYER.up(sibling))):
            layer_call(path, lambda sibling=sibling: intercept.LAYER.for_write(sibling, True, False))
    return call_with(original, path, redirected, args, kwargs)


def _route_torch(torch) -> None:
    import torch.serialization as serialization

    patch(serialization, "save", _named_write)
    patch(serialization, "load", reading)
    torch.save, torch.load = serialization.save, serialization.load


def _route_safetensors_torch(module) -> None:
    patch(module, "save_file", _named_write)
    patch(module, "load_file", reading)


def _route_safetensors(module) -> None:
    patch(module, "safe_open", reading)


def _route_sqlite(module) -> None:
    patch(module, "connect", _sqlite_connect)
    module.dbapi2.connect = module.connect


def install() -> None:
    patch(subprocess.Popen, "_execute_child", _execute_child)
    patch(os, "system", _started("system"))
    for name in ("execv", "execve"):
        patch(os, name, _started("exec"))
    for name in ("posix_spawn", "posix_spawnp"):
        if hasattr(os, name):
            patch(os, name, _started("spawn"))
    when_imported("torch", _route_torch)
    when_imported("sqlite3", _route_sqlite)
    when_imported("safetensors", _route_safetensors)
    when_imported("safetensors.torch", _route_safetensors_torch)
    when_imported("safetensors.numpy", _route_safetensors_torch)
