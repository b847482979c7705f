"""The command line's own failures, apart from the commands that raise them (so each command module
imports them from here, and none imports another): each becomes one line on stderr and an exit
status in `cli.run_command`."""

from __future__ import annotations


class CliError(Exception):
    """A failure of the command itself, reported as `pt2serve: <name>: message` (exit status 1)."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


class UsageError(Exception):
    """Bad command-line input found after parsing (exit status 2)."""
