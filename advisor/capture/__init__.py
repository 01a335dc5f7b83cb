"""Capture: run the user's model (in the supervised child) and record what it does."""
