"""The import hook the file layer and the step window use to act right after ``import torch``."""

from __future__ import annotations

import importlib
import importlib.util
import sys

from advisor.files.imports import when_imported


def test_a_lookup_of_the_module_before_its_import_does_not_use_up_the_callbacks(tmp_path, monkeypatch):
    """advisor's own code asks importlib.util.find_spec("torch") where torch lives before the script imports it;
    the routes waiting for the import (torch.save into the shadow) must still run when it comes."""
    (tmp_path / "late_module.py").write_text("VALUE = 1\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    when_imported("late_module", lambda module: seen.append(module.VALUE))
    assert importlib.util.find_spec("late_module") is not None and seen == []  # a lookup: nothing runs yet
    importlib.import_module("late_module")
    assert seen == [1]
    del sys.modules["late_module"]
    importlib.import_module("late_module")
    assert seen == [1]  # once
    del sys.modules["late_module"]
