"""advisor's version, one place for the package, the command line and every report."""

__version__ = "0.1.0"
