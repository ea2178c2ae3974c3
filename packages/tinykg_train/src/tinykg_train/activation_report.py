"""The per-module activation-memory table (CSV) and bar chart (PNG) of one measured training step."""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from pathlib import Path

from tinykg_train.run_dir import write_atomic, write_text_atomic


def write_activation_table(
    path: Path, by_module: Mapping[str, int], widths: Mapping[str, str] | None = None
) -> Path:
    """CSV `module,bytes,share`, largest first, with a `total` row; with `widths` (`bits: auto`:
    module -> the widths chosen for its quantized tensors, "4,2") also a `bits` column."""
    total = sum(by_module.values())
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["module", "bytes", "share", *(["bits"] if widths is not None else [])])
    for name, nbytes in sorted(by_module.items(), key=lambda item: -item[1]):
        share = f"{nbytes / total:.4f}" if total else "0"
        bits = [widths.get(name, "")] if widths is not None else []
        writer.writerow([name or "(model)", int(nbytes), share, *bits])
    writer.writerow(["total", int(total), "1.0000" if total else "0", *([""] if widths else [])])
    return write_text_atomic(path, buffer.getvalue())


def write_activation_chart(path: Path, by_module: Mapping[str, int], title: str) -> Path:
    """Horizontal bars of the bytes each module holds for backward (top 20 modules)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(by_module.items(), key=lambda item: -item[1])[:20][::-1]
    names = [name or "(model)" for name, _ in rows]
    kib = [nbytes / 1024 for _, nbytes in rows]
    fig, ax = plt.subplots(figsize=(6.5, 0.9 + 0.28 * max(len(rows), 1)), dpi=90)
    ax.barh(names, kib, color="#4C72B0")
    ax.set_xlabel("KiB saved for backward (one training step)")
    ax.set_title(title, fontsize=10)
    ax.set_xlim(left=0)
    fig.tight_layout()
    write_atomic(path, lambda tmp: fig.savefig(tmp, format="png"))
    plt.close(fig)
    return path
