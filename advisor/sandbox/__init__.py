"""The supervised child: the process that runs user code (capture and verification stages).

``supervisor`` starts and watches it, ``worker`` is its entry point, ``stages`` the stage table
and the loop both it and the in-process Python API run (``inline``).
"""
