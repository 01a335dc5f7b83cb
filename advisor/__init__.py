"""advisor: a PyTorch performance auditor."""

__version__ = "0.1.0"
