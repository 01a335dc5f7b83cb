"""The user's workload: the model-file protocol (target), what a step runs on (feed), the step
itself, and its timing.
"""
