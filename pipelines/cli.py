"""tinykg ingest|train|sweep|demo ...: the pipelines as one console script.

`pip install -r requirements.txt` installs this repository's root project (`tinykg`, whose one
package is `pipelines`), so `tinykg COMMAND ...` and `python -m pipelines.COMMAND ...` both work
from any directory. `tinykg COMMAND` runs that module's `main` with the same flags, `--help` and
exit codes: 0 on success, 2 for bad input (one line on stderr), 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from importlib import metadata

from pipelines._cli import run_cli

COMMANDS = {  # name: what it does (the module is pipelines.<name>)
    "ingest": "raw KG-recommendation files -> a validated Parquet dataset dir",
    "train": "train one recommender with compressed activations -> metrics.json, MLflow run",
    "sweep": "a Ray Tune sweep over models, bit widths and settings, one MLflow run per trial",
    "demo": "synthetic data -> ingest -> KGAT at FP32 and INT2 -> a comparison table",
}


def build_parser() -> argparse.ArgumentParser:
    width = max(map(len, COMMANDS))
    listing = "\n".join(f"  {name:<{width}}  {text}" for name, text in COMMANDS.items())
    parser = argparse.ArgumentParser(
        prog="tinykg",
        usage="tinykg [-h] [--version] COMMAND [ARGS ...]",
        description="TinyKG: knowledge-graph recommenders trained with compressed activations.",
        epilog=f"commands:\n{listing}\n\n`tinykg COMMAND --help` shows a command's flags; "
        "`python -m pipelines.COMMAND` is the same program.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", metavar="COMMAND", choices=COMMANDS, help=", ".join(COMMANDS))
    parser.add_argument("--version", action="version", version=f"tinykg {_version()}")
    return parser


def _version() -> str:
    try:
        return metadata.version("tinykg")
    except metadata.PackageNotFoundError:  # run from a checkout without `pip install -e .`
        return "(not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    """Parse `COMMAND ARGS...` and hand ARGS to `pipelines.COMMAND.main`; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if argv and argv[0] in COMMANDS:  # the command's own flags, --help included, are its business
        command, rest = argv[0], argv[1:]
    else:  # no command first: --help and --version exit 0 inside, anything else 2
        parser.parse_args(argv)
        parser.error(f"the first argument must be a command, one of {', '.join(COMMANDS)}")
    module = importlib.import_module(f"pipelines.{command}")  # heavy imports happen in its main
    return run_cli(module.main, rest)


if __name__ == "__main__":
    sys.exit(main())
