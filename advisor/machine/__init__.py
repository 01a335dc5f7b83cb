"""The machine's state while advisor measures: what else ran on its CPUs and GPUs (``conditions.py``,
``gpus.py``), the records they fill (``state.py``), and the one reader of ``/proc`` (``procfs.py``)."""
