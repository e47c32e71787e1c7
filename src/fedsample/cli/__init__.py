"""The ``fedsample`` command line: thin commands over the library, one module per command."""

from fedsample.cli._app import main

__all__ = ["main"]
