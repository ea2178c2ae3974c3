"""Write one benchmark's section of BENCHMARKS.md, with the command, machine and date it was measured on.

BENCHMARKS.md holds current results only: one section per (benchmark, dataset, device), named by
`section_name` (`accuracy-music-kgcn-cpu`, `kernels-cuda`), delimited by HTML comments, so scripts
can run alone and in any order without clobbering each other, and a re-run replaces its section
(superseded runs live in git history). Names that do not follow the rule are refused: an experiment
that needs its own label runs with `--no-write`, or with `TINYKG_BENCHMARKS_MD` pointing at a file of
its own. `TINYKG_BENCHMARKS_MD` also redirects the file on the GPU machine, into its output folder,
to be merged back here (`benchmarks.merge_sections`).
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
# every benchmark that writes BENCHMARKS.md, in the order its sections appear there
BENCHMARKS = (
    "accuracy-matrix",  # the headline: every dataset, model and width against FP32
    "ingest",
    "sampling",
    "compress",
    "kernels",
    "memory",
    "memory-peak",  # bench_memory --peak: the whole process's peak and its breakdown
    "gradient-error",
    "sensitivity",
    "accuracy",
    "epoch-time",
    "distributed",
    "sampled-training",
    "offload",  # bench_offload: tables in host memory against on the device
    "scale",
)
DEVICES = ("cpu", "cuda")
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


def widest_vector_extension(flags: set[str]) -> str | None:
    """`AVX-512`, `AVX2`, `AVX` or `SSE4.2` from /proc/cpuinfo's flags (x86), else None."""
    for flag, name in (
        ("avx512f", "AVX-512"),
        ("avx2", "AVX2"),
        ("avx", "AVX"),
        ("sse4_2", "SSE4.2"),
    ):
        if flag in flags:
            return name
    return None


def machine_description() -> str:
    """One line: CPU model, its widest vector extension and cores, RAM, and the GPU when torch
    sees one. The extension matters: the native CPU loops are built for the CPU they run on
    (`-march=native`), and the same model name in a VM may come with or without AVX-512."""
    fields: dict[str, str] = {}  # the first processor's lines of /proc/cpuinfo
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if not line.strip():
                break
            name, _, value = line.partition(":")
            fields[name.strip()] = value.strip()
    except OSError:
        pass
    cpu = fields.get("model name") or platform.processor() or platform.machine()
    flags = set(fields.get("flags", "").split())
    vectors = widest_vector_extension(flags)
    if vectors:
        cpu = f"{cpu} ({vectors})"
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


def section_name(benchmark: str, device: str, dataset: str | None = None) -> str:
    """The one section of BENCHMARKS.md for `benchmark` on `dataset` (None: the benchmark has no
    dataset, or measures a fixed set of them in one run) and `device` (`cpu` or `cuda`):
    `<benchmark>[-<dataset>]-<device>`, the dataset lowercased with other characters than
    letters, digits and dots as `-`."""
    if benchmark not in BENCHMARKS:
        raise ValueError(f"benchmark must be one of {', '.join(BENCHMARKS)} (got {benchmark!r})")
    if device not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)} (got {device!r})")
    slug = re.sub(r"[^a-z0-9.]+", "-", (dataset or "").lower()).strip("-")
    if dataset is not None and not slug:
        raise ValueError(f"dataset {dataset!r} has no letter or digit to name a section by")
    return "-".join(part for part in (benchmark, slug, device) if part)


def parse_section_name(name: str) -> tuple[str, str | None, str]:
    """(benchmark, dataset or None, device) of a name `section_name` makes; a ValueError names the
    rule for anything else."""
    for benchmark in sorted(BENCHMARKS, key=len, reverse=True):
        if not name.startswith(f"{benchmark}-"):
            continue
        rest = name[len(benchmark) + 1 :]
        for device in DEVICES:
            if rest == device:
                return benchmark, None, device
            dataset = rest[: -len(device) - 1]
            if rest.endswith(f"-{device}") and section_name(benchmark, device, dataset) == name:
                return benchmark, dataset, device
    raise ValueError(
        f"section {name!r} does not follow <benchmark>[-<dataset>]-<device> (benchmark one of "
        f"{', '.join(BENCHMARKS)}; device cpu or cuda): BENCHMARKS.md keeps one current section "
        "per benchmark, dataset and device; run an experiment with --no-write instead"
    )


def figure_name(section: str) -> str:
    """The file name of a section's figure under benchmarks/figures: the section's own name, so a
    re-run replaces it and a pruned section's figure is easy to find."""
    return f"{section}.png"


def section_order(name: str) -> tuple[int, str, str]:
    """Where a section sits in BENCHMARKS.md: its benchmark's place in `BENCHMARKS`, then its
    dataset (none first) and device."""
    benchmark, dataset, device = parse_section_name(name)
    return BENCHMARKS.index(benchmark), dataset or "", device


def write_section(section: str, title: str, body: str, command: str | None = None) -> Path:
    """Replace section `section` of BENCHMARKS.md with `body` under a provenance header, or insert it
    where its benchmark's sections are (`BENCHMARKS` order, then dataset and device)."""
    parse_section_name(section)  # refuses free-form names
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
        else "# Benchmarks\n\nEvery figure below was measured by the script named in its section, in "
        "one run. One section per benchmark, dataset and device, holding its latest run (a re-run "
        "replaces it; earlier runs are in the git history of this file).\n"
    )
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text)
    else:
        text = insert_section(text, section, block)
    path.write_text(text)
    return path


def insert_section(text: str, section: str, block: str) -> str:
    """`text` with `block` before the first section that sorts after `section`, else at the end
    (sections with names outside the rule are passed over)."""
    for match in re.finditer(r"<!-- begin:(?P<name>[\w.-]+) -->", text):
        try:
            later = section_order(match["name"]) > section_order(section)
        except ValueError:
            continue
        if later:
            return text[: match.start()] + block + "\n\n" + text[match.start() :]
    return text.rstrip() + "\n\n" + block + "\n"


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


def mib(value: float | None, decimals: int = 1) -> str:
    """Bytes as MiB (2^20) with thousands separators, `n/a` for a figure that is missing."""
    return "n/a" if value is None else f"{value / 2**20:,.{decimals}f}"
