"""Errors that describe a problem with the user's configuration or inputs (not a bug).

CLIs in `pipelines/` print them as one line and exit with status 2.
"""


class TinyKGError(Exception):
    """Bad configuration, dataset dir or checkpoint; the message says what is wrong and how to fix it."""


class ConfigError(TinyKGError):
    """An invalid training or sweep setting (unknown model, bits not in {1, 2, 4, 8, 32}, ...)."""
