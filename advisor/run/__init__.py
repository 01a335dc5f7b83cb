"""``advisor run -- python train.py``: audit an unmodified script.

The command runs as given with a bootstrap on ``PYTHONPATH`` (``boot/sitecustomize.py``): in the
script's own process, once torch is imported, ``window.StepWindow`` watches step boundaries
(optimizer steps, or top-level forwards for inference), times a window of steps profiler-free,
profiles a few more, and writes what it measured for ``launch.py`` to turn into Evidence.
"""
