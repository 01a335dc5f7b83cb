"""The built-in rule pack: one rule per module, its documentation in the module docstring, grouped by the layer
where the latency it finds hides (the report's sections): hardware, runtime libraries, the model, the application.
A rule whose fix needs code of its own (a graph rewrite, a source patch) is a package: the rule in its
``__init__``, the rest beside it."""
