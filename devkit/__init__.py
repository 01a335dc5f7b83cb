"""What advisor's tests and its benchmarks share, so that neither imports the other: contention made for real
(``contention.py``), the saved evidence of the samples' audits (``saved_evidence.py``) and many ranks made from
one real trace (``synthetic_ranks.py``). Not part of advisor: it is not installed with it."""
