"""The command line: the parser, one module per command, and main(), the only place that exits."""

from triton_release.cli.main import main

__all__ = ["main"]
