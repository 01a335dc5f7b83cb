"""advisor: a PyTorch performance auditor."""

__version__ = "0.1.0"


def audit(model, inputs, **options):
    """Audit a live model in this process; see advisor.commands.api.audit. Returns the Report."""
    from advisor.commands.api import audit as run

    return run(model, inputs, **options)
