"""User-facing error types and the exit codes of the command line.

Every error a user can cause (bad model, bad inputs, bad config, a wrong option) is a :class:`UserError` whose
message is one line naming the object, what was expected and how to fix it. The CLI prints it without a
traceback and exits with :attr:`UserError.exit_code`: :data:`EXIT_USAGE` (2), the code click gives its own usage
errors, so that a CI job can tell "the check failed" (:data:`EXIT_FAIL`, 1) from "the check could not run as
asked" (2) and from a bug (:data:`EXIT_INTERNAL`, 3).
"""

from __future__ import annotations

#: The command ran and what it checks holds (verdict PASS or WARN, no regression, target met, ...).
EXIT_OK = 0
#: The command ran and what it checks does not hold: a FAIL verdict, a failed signoff criterion, a regression,
#: a tune target not met, memory conflicts, an environment mismatch (doctor), a padding leak reaching an output.
EXIT_FAIL = 1
#: The command could not run as asked: a usage error (unknown option, bad option value, a threshold that does
#: not parse), or input it cannot use (a missing or malformed model, inputs, config, policy or report folder,
#: a model it cannot load or compile, a download that fails).
EXIT_USAGE = 2
#: A bug in npuscope (a traceback is printed).
EXIT_INTERNAL = 3
#: Interrupted (128 + SIGINT), terminated (128 + SIGTERM), the reader of stdout went away (128 + SIGPIPE).
EXIT_INTERRUPTED, EXIT_TERMINATED, EXIT_PIPE = 130, 143, 141

#: The exit codes as the README and ``npuscope --help`` list them.
#: --timeout SECONDS reached (as GNU timeout(1)).
EXIT_TIMEOUT = 124
EXIT_CODES_TEXT = (f"Exit codes: {EXIT_OK} success (verdict PASS or WARN, no regression, target met); "
                   f"{EXIT_FAIL} the check failed (verdict FAIL, a signoff criterion failed, a regression, tune "
                   f"target not met, memory conflicts); {EXIT_USAGE} usage error or bad input (an unknown option, "
                   "a bad option value, a file, model, config or policy that cannot be used); "
                   f"{EXIT_INTERNAL} internal error; {EXIT_INTERRUPTED} Ctrl-C; {EXIT_TERMINATED} SIGTERM; "
                   f"{EXIT_TIMEOUT} --timeout reached; {EXIT_PIPE} stdout closed by its reader.")


class UserError(Exception):
    """A mistake in what the user gave us; printed as one line, exit code :data:`EXIT_USAGE`."""

    exit_code = EXIT_USAGE


class UsageError(UserError):
    """A wrong command line or config option; exit code :data:`EXIT_USAGE`."""


class ModelError(UserError):
    """The ONNX model cannot be loaded, checked or compiled."""


class InputError(UserError):
    """The input feed (npz, range spec, loader) does not fit the model."""


class ConfigError(UsageError):
    """A config file or option is unknown or has an invalid value."""
