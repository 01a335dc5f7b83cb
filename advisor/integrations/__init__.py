"""advisor inside a training framework's own loop, as one line of the user's code: a callback that audits a window
of the real training's steps from within (``in_process.InProcessAudit``, the step window ``advisor run`` installs
in a script) and writes the same report, while the training goes on untouched. ``transformers.AdvisorCallback``
for the Hugging Face Trainer, ``lightning.AdvisorCallback`` for Lightning; each imports its framework, which
advisor itself never depends on."""
