"""Shared CLI plumbing: user errors become one line on stderr and exit status 2; usage lines name
the command the way it was run."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path


def prog_name(command: str) -> str:
    """`tinykg COMMAND` under the console script, else `python -m pipelines.COMMAND`."""
    if Path(sys.argv[0]).name == "tinykg":
        return f"tinykg {command}"
    return f"python -m pipelines.{command}"


def _user_error_types() -> tuple[type[BaseException], ...]:
    """The exception classes that mean "bad input", imported lazily so a CLI only loads what it uses."""
    from kg_data.errors import KGDataError

    types: list[type[BaseException]] = [KGDataError]
    try:
        from tinykg_train.errors import TinyKGError
    except ImportError:  # an ingest-only install has no tinykg_train
        pass
    else:
        types.append(TinyKGError)
    return tuple(types)


def run_cli(main: Callable[[Sequence[str] | None], int | None], argv: Sequence[str] | None = None) -> int:
    """Run `main(argv)`; a user error prints `error: <message>` and returns 2 instead of a traceback."""
    user_errors = _user_error_types()
    try:
        return main(argv) or 0
    except user_errors as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
