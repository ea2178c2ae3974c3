"""Errors that describe a problem with the user's input (not a bug).

CLIs in `pipelines/` print them as one line and exit with status 2.
"""

from __future__ import annotations


class KGDataError(Exception):
    """Bad data or arguments given to kg_data; the message says what is wrong and how to fix it."""


class IngestError(KGDataError):
    """A raw input file is unusable: names the file, the 1-based line (when known) and the problem."""

    def __init__(self, file: object, line: int | None, reason: str) -> None:
        self.file = str(file)
        self.line = line
        self.reason = reason
        where = f"{self.file}:{line}" if line is not None else self.file
        super().__init__(f"{where}: {reason}")
