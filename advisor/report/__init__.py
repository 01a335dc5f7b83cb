"""The Report schema and its renderings (JSON, HTML, terminal)."""

from advisor.report.model import Report

__all__ = ["Report"]
