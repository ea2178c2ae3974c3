"""python -m benchmarks.merge_sections OTHER.md [SECTION ...]: copy sections into BENCHMARKS.md.

A benchmark run elsewhere (a GPU machine, with `TINYKG_BENCHMARKS_MD` pointing into its output
folder) writes its sections into a copy of BENCHMARKS.md; this copies those sections back verbatim,
provenance header included, replacing the same sections here or inserting them in their place.
Without SECTION names it copies every section whose text differs from ours. Sections whose names do
not follow the rule of `benchmarks._report.section_name` are refused.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks._report import benchmarks_md, insert_section, parse_section_name

SECTION = re.compile(r"<!-- begin:(?P<name>[\w.-]+) -->.*?<!-- end:(?P=name) -->", re.DOTALL)


def sections(text: str) -> dict[str, str]:
    """Every delimited section of a BENCHMARKS.md text, by name."""
    return {match["name"]: match[0] for match in SECTION.finditer(text)}


def merge(ours: str, theirs: str, names: Sequence[str] | None) -> tuple[str, list[str]]:
    """`ours` with the named (or all differing) sections of `theirs`; and the names copied."""
    ours_by_name, theirs_by_name = sections(ours), sections(theirs)
    missing = [name for name in names or () if name not in theirs_by_name]
    if missing:
        raise SystemExit(
            f"error: no section {', '.join(missing)} in the other file (it has: {', '.join(theirs_by_name)})"
        )
    wanted = names or [n for n, block in theirs_by_name.items() if ours_by_name.get(n) != block]
    for name in wanted:
        try:
            parse_section_name(name)
        except ValueError as exc:
            raise SystemExit(f"error: {exc}") from None
        block = theirs_by_name[name]
        if name in ours_by_name:
            ours = ours.replace(ours_by_name[name], block)
        else:
            ours = insert_section(ours, name, block)
    return ours, list(wanted)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.merge_sections", description=__doc__.splitlines()[0]
    )
    parser.add_argument("other", type=Path, help="a BENCHMARKS.md written elsewhere")
    parser.add_argument(
        "names",
        nargs="*",
        metavar="SECTION",
        help="sections to copy (default: every one that differs)",
    )
    args = parser.parse_args(argv)
    if not args.other.is_file():
        print(f"error: {args.other}: no such file", file=sys.stderr)
        return 2
    target = benchmarks_md()
    merged, copied = merge(target.read_text(), args.other.read_text(), args.names)
    target.write_text(merged)
    print(f"copied {', '.join(copied) or 'nothing'} into {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
