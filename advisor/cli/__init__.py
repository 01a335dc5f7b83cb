"""The command line: ``advisor audit``, ``run``, ``ready``, ``analyze``, ``diff``, ``fix``, ``rules [explain SLUG]``
(``entry.py``), the fix command (``fix_command.py``), what they share (``common.py``) and every option, declared
once (``flags.py``)."""

from advisor.cli.entry import cli, main

__all__ = ["cli", "main"]
