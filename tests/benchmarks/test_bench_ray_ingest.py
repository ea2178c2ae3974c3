"""The pieces of bench_ray_ingest's Ray Data pipeline that decide its counts: line-aligned shards,
the parsing of triples and user lines, the distinct ids and their remapping."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from benchmarks.bench_ray_ingest import parse_interactions, parse_triples, remap, shard_lines


@pytest.mark.parametrize("n_shards", [1, 3, 7])
def test_shards_cut_at_line_ends_and_keep_every_byte(tmp_path: Path, n_shards: int):
    lines = [f"{u} " + " ".join(str(i) for i in range(u % 5 + 1)) for u in range(50)]
    source = tmp_path / "train.txt"
    source.write_text("\n".join(lines) + "\n")
    shards = shard_lines(source, tmp_path, n_shards)
    assert len(shards) == n_shards
    pieces = [shard.read_bytes() for shard in shards]
    assert b"".join(pieces) == source.read_bytes()
    assert all(piece.endswith(b"\n") for piece in pieces if piece)


def test_triples_and_user_lines_parse_to_rows():
    triples = parse_triples(pa.table({"text": ["0 1 2", "3 0 4 "]}))
    assert triples.to_pydict() == {"head": [0, 3], "relation": [1, 0], "tail": [2, 4]}
    pairs = parse_interactions(pa.table({"text": ["7 1 2 3", "8 5", "9 4 6"]}))
    assert pairs.to_pydict() == {"user": [7, 7, 7, 8, 9, 9], "item": [1, 2, 3, 5, 4, 6]}


def test_remap_gives_positions_in_the_sorted_distinct_ids():
    batch = {"user": np.array([30, 10, 30]), "item": np.array([5, 7, 5])}
    out = remap(batch, {"user": np.array([10, 20, 30]), "item": np.array([5, 7])})
    assert out["user"].tolist() == [2, 0, 2] and out["item"].tolist() == [0, 1, 0]
