"""The Report schema and its renderings (JSON, HTML, terminal)."""

from advisor.report.schema import Report

__all__ = ["Report"]
