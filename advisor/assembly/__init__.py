"""The report's assembly, one for every entry point: the rules run over what was gathered, the report filled from
the evidence (``build.py``, ``summarize.py``), the measurements' quality judged (``quality.py``) and the fixes'
measured verdicts folded in (``verification.py``). It sits above the rules and verification; capture and
verification import neither it nor the report."""
