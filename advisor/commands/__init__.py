"""The entry points, one module each: audit, run, ready, analyze, diff and the Python API.

Each gathers evidence its own way, then hands it to the one report assembly and the one
verification orchestration.
"""
