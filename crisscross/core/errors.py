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
