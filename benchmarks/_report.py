"""Write one benchmark's section of BENCHMARKS.md, with the command, machine and date it was measured on.

Each script owns one section, delimited by HTML comments, so scripts can run alone and in any order
without clobbering each other. `TINYKG_BENCHMARKS_MD` redirects the file (e.g. on the GPU machine,
into its output folder, to be merged back here).
"""

from __future__ import annotations

import datetime as _dt
import importlib.util
import os
import platform
import re
import shlex
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
FIGURES = REPO_ROOT / "benchmarks" / "figures"
SHARED_DATA = Path(os.environ.get("TINYKG_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


def benchmarks_md() -> Path:
    return Path(os.environ.get("TINYKG_BENCHMARKS_MD", REPO_ROOT / "BENCHMARKS.md"))


def figures_dir() -> Path:
    """Where plots go: benchmarks/figures, or `TINYKG_FIGURES_DIR` (e.g. the GPU machine's output
    folder, beside a redirected BENCHMARKS.md); BENCHMARKS.md links them as `benchmarks/figures/NAME`."""
    path = Path(os.environ.get("TINYKG_FIGURES_DIR", FIGURES))
    path.mkdir(parents=True, exist_ok=True)
    return path


def figures_dir_for(write: bool) -> Path | None:
    """`figures_dir()` for a run that writes its section, None for one that does not or when
    matplotlib is missing (said on stderr): the report then leaves its figures out."""
    if not write:
        return None
    if importlib.util.find_spec("matplotlib") is None:
        print("matplotlib is not installed: no figures", file=sys.stderr)
        return None
    return figures_dir()


def machine_description() -> str:
    """One line: CPU model and cores, RAM, and the GPU when torch sees one."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    parts = [f"{cpu}, {os.cpu_count()} cores"]
    try:
        import psutil

        parts.append(f"{psutil.virtual_memory().total / 2**30:.0f} GiB RAM")
    except ImportError:
        pass
    try:
        import torch

        if torch.cuda.is_available():
            parts.append(f"GPU {torch.cuda.get_device_name(0)}")
        else:
            parts.append("no GPU")
        parts.append(f"torch {torch.__version__}")
    except ImportError:
        pass
    parts.append(f"Python {platform.python_version()}")
    return "; ".join(parts)


def invoked_command() -> str:
    """The command line that ran this script, as a user would retype it."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    head = ["python", "-m", spec.name] if spec and spec.name else ["python", *sys.argv[:1]]
    return shlex.join([*head, *sys.argv[1:]])


def write_section(section: str, title: str, body: str, command: str | None = None) -> Path:
    """Replace (or append) section `section` of BENCHMARKS.md with `body` under a provenance header."""
    path = benchmarks_md()
    begin, end = f"<!-- begin:{section} -->", f"<!-- end:{section} -->"
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    block = (
        f"{begin}\n## {title}\n\n"
        f"- command: `{command or invoked_command()}`\n"
        f"- machine: {machine_description()}\n"
        f"- date: {stamp}\n\n"
        f"{body.strip()}\n{end}"
    )
    text = (
        path.read_text()
        if path.exists()
        else "# Benchmarks\n\nEvery figure below was measured by the script named in its section, in one run.\n"
    )
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    text = (
        pattern.sub(lambda _: block, text)
        if pattern.search(text)
        else text.rstrip() + "\n\n" + block + "\n"
    )
    path.write_text(text)
    return path


def publish_section(section: str, title: str, body: str, *, write: bool) -> Path | None:
    """The end of a benchmark run: `write_section` and a line saying where it went, or, for a
    `--no-write` run (`write=False`), nothing (BENCHMARKS.md untouched, returns None)."""
    if not write:
        return None
    path = write_section(section, title, body)
    print(f"wrote section '{section}' of {path}")
    return path


def width_label(bits: int) -> str:
    """How a report names a bit width: FP32 (uncompressed) or INT<bits>."""
    return "FP32" if bits == 32 else f"INT{bits}"


def markdown_table(headers: list[str], rows: list[list[object]]) -> str:
    """A GitHub-flavoured markdown table; floats keep the formatting the caller gave them."""
    line = lambda cells: "| " + " | ".join(str(c) for c in cells) + " |"  # noqa: E731
    return "\n".join([line(headers), line(["---"] * len(headers)), *(line(r) for r in rows)])
