"""The built-in rule pack: one rule per file, its documentation in the module docstring."""
