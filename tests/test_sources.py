"""Which frames are the user's: the call site a script's model is called from, as advisor run records it."""

from __future__ import annotations

import importlib.util
import sys

from advisor.sources import direct_user_caller, is_library_path


def _caller():
    return direct_user_caller(sys._getframe(1))


def test_the_users_own_line_is_the_call_site_and_a_librarys_loop_is_none(tmp_path):
    installed = tmp_path / "lib" / "python3.11" / "site-packages" / "trainer_lib.py"
    installed.parent.mkdir(parents=True)
    installed.write_text("def fit(step):\n    return step()\n")
    spec = importlib.util.spec_from_file_location("trainer_lib", installed)
    library = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(library)
    assert is_library_path(str(installed))
    assert library.fit(_caller) is None  # a Trainer's loop called the model: no line of the user's to edit
    here = sys._getframe().f_lineno + 1
    assert _caller() == (__file__, here)
