"""User-facing error types.

Every error a user can cause (bad model, bad inputs, bad config) is a :class:`UserError` whose message is one
line naming the object, what was expected and how to fix it. The CLI prints it without a traceback and exits
with :attr:`UserError.exit_code` (1 for input errors, 2 for usage errors).
"""

from __future__ import annotations


class UserError(Exception):
    """A mistake in what the user gave us; printed as one line, exit code 1."""

    exit_code = 1


class UsageError(UserError):
    """A wrong command line or config option; exit code 2."""

    exit_code = 2


class ModelError(UserError):
    """The ONNX model cannot be loaded, checked or compiled."""


class InputError(UserError):
    """The input feed (npz, range spec, loader) does not fit the model."""


class ConfigError(UsageError):
    """A config file or option is unknown or has an invalid value."""
