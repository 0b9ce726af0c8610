"""The one error class a command maps to exit code 2 (bad input, nothing was written)."""


class BadInput(ValueError):
    """Input a command refuses before doing any work: a config, span, file or argument.

    Subclasses name where the problem is (`ConfigError`, `SpanError`, `InputError`); the
    CLI maps every one of them, in one place, to `exit_codes.BAD_INPUT` and prints the
    message, never a traceback.
    """
