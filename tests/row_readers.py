"""Which stored inputs KGAT's compressed layer reads by rows in backward (a test helper)."""

from __future__ import annotations

import importlib

PROPAGATED = importlib.import_module("tinykg_train.compress.ops.propagated_bi_interaction")


def record_row_readers(monkeypatch) -> list[tuple[str, bool]]:
    """Patch `_row_reader` to record, per backward, the stored input's type and whether it was
    read by rows; the list fills as backward passes run."""
    readers: list[tuple[str, bool]] = []
    row_reader = PROPAGATED._row_reader

    def recording(stored, blocks):
        reader = row_reader(stored, blocks)
        readers.append((type(stored).__name__, reader is not None))
        return reader

    monkeypatch.setattr(PROPAGATED, "_row_reader", recording)
    return readers


def decode_whole(monkeypatch) -> None:
    """Patch the layer back to decoding its stored input whole."""
    monkeypatch.setattr(PROPAGATED, "_row_reader", lambda stored, blocks: None)
