"""Errors a user causes and can fix from the message alone.

The ``crisscross`` command prints them as one line (what, where, what to do) and exits with
status 2; only ``--debug`` shows the traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """Base of every error the command shows as one line."""


class ParamError(UserError, ValueError):
    """A params value or key is wrong; the message names its dotted key."""


class InputError(UserError, ValueError):
    """An input file or folder is missing, unreadable or malformed; the message names it."""


class MissingExtra(UserError, ImportError):
    """A command needs an optional extra that is not installed; the message says which to install."""


def one_line(error: BaseException) -> str:
    """The first line of an error's message (its type's name when it has none): what the command
    shows.  Beam re-raises a step's error with the step name and the worker's traceback appended,
    and parsers' messages may quote several lines, which the user does not need without ``--debug``."""
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]
