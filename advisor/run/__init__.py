"""``advisor run -- python train.py``, the parent's side: the command run as given with the bootstrap on
``PYTHONPATH`` (``launch.py``; the bootstrap and the step window it installs in the script are
``advisor/script/``), what ended a step (``kinds.py``), each rank's failure read back (``rank_failures.py``)
and what the window wrote turned into evidence (``gathered_run.py``). A fix is verified in further runs of the
script by ``verify/arms.py``.
"""
