"""What runs inside the audited script's own process: the bootstrap (``boot/sitecustomize.py``, put on the
script's ``PYTHONPATH``) and, once torch is imported, the step window (``window.StepWindow``): it watches step
boundaries (optimizer steps, backwards, or the model's calls), times a window of steps profiler-free, profiles a
few more, and writes what it measured for the parent (``advisor/run/``) to turn into evidence. Its state is one
record (``window_state.py``); each watcher gets that record and the callbacks it needs.
"""
