"""The ``snapvc`` command."""

from snapvc.cli.main import cli, main

__all__ = ["cli", "main"]
