"""What ends a step in ``advisor run``: the kinds of step boundary, and which wins when a script shows several."""

OPTIMIZER = "optimizer"
FORWARD = "forward"
BACKWARD = "backward"  # a script that runs backwards but creates no optimizer: it updates its parameters by hand
MARKER = "marker"  # --step-marker: each return of the named function ends a step
PROFILER_STEP = "profiler-step"  # the script's own prof.step() calls
# Which boundaries win when a script shows several: optimizer steps, then the script's own
# ProfilerStep markers, then backwards, then the model's outermost forwards (--step-marker overrides them all).
RANK = {FORWARD: 0, BACKWARD: 1, PROFILER_STEP: 2, OPTIMIZER: 3, MARKER: 4}
