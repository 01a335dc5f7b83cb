"""advisor: a PyTorch performance auditor."""

__version__ = "0.1.0"


def audit(model, inputs, **options):
    """Audit a live model in this process; see advisor.api.audit. Returns the Report."""
    from advisor.api import audit as run

    return run(model, inputs, **options)
