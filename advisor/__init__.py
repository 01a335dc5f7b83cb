"""advisor: a PyTorch performance auditor. From Python: ``advisor.audit(model, inputs)``."""

from advisor.version import __version__

__all__ = ["__version__", "audit"]


def audit(model, inputs, **options):
    """Audit a live model in this process; see advisor.commands.api.audit. Returns the Report."""
    from advisor.commands.api import audit as run

    return run(model, inputs, **options)
