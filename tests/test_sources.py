"""Which frames are the user's: the call site a script's model is called from, as advisor run records it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

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


def test_every_package_of_advisor_recorded_on_another_machine_is_advisors_not_the_users():
    """Frames of advisor's own code in a trace recorded elsewhere (another install prefix) are recognised by its
    packages as they are on disk, not by a list that a renamed or added package would silently fall out of."""
    import advisor

    root = Path(advisor.__file__).parent
    packages = sorted(p.name for p in root.iterdir() if (p / "__init__.py").exists())
    assert {"capture", "run", "machine", "assembly"} <= set(packages)
    for package in packages:
        assert is_library_path(f"/opt/elsewhere/lib/advisor/{package}/anything.py"), package
        assert is_library_path(f"advisor/{package}/anything.py"), package  # as the profiler writes a frame
    assert not is_library_path("/home/someone/project/train.py")
    assert not is_library_path("/home/someone/project/advisory/run/train.py")
