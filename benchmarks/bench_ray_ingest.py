"""Streaming ingest against Ray Data on the same raw KGAT files: is a cluster ingest worth building?

    python -m benchmarks.bench_ray_ingest [--size 100m] [--cpus 2] [--work-dir DIR] [--no-write]

A synthetic raw KGAT dataset of `--size` triples + interactions (`kg_data.synthetic`, as
`bench_scale` makes it) is ingested twice, each in a fresh child process:

1. `python -m pipelines.ingest` (the project's single-machine streaming ingest: validation,
   deduplication, id maps, the given splits, Parquet and metadata);
2. Ray Data on a private local Ray instance of `--cpus` CPUs: the raw files cut into line-aligned
   shards (one read task each: Ray Data reads a file in one task), triples and user-item pairs parsed
   in parallel blocks, the distinct entities, relations and users aggregated, every id remapped
   against those tables (broadcast to the tasks), and the tables written as Parquet.

Ray Data's pipeline does less than ingest: no deduplication, no checks of the splits against each
other, no validation or line numbers in errors. Its time is therefore a lower bound of what a Ray
Data ingest of the same output would take. Per pipeline: seconds (Ray's start-up reported apart), MB/s of raw text, and the peak
memory of all its processes together (ingest: the child's `wait4` peak RSS; Ray: the largest sum
of the resident sets of the driver and every process of its instance, sampled every 0.2 s,
shared pages counted once per process, so an upper bound). Section `ingest-ray-data-<size>-cpu`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks._report import REPO_ROOT, markdown_table, publish_section, section_name
from benchmarks._scale_report import parse_size_preset
from benchmarks.bench_scale import generate, ingest

KGAT_FILES = ("kg_final.txt", "train.txt", "valid.txt", "test.txt")  # what the generator writes


# -- the Ray Data child ----------------------------------------------------------------------------


def shard_lines(path: Path, out_dir: Path, n_shards: int) -> list[Path]:
    """`path` cut into `n_shards` files at line boundaries (Ray Data reads each file in one task)."""
    size = path.stat().st_size
    shards, start = [], 0
    with open(path, "rb") as source:
        for index in range(n_shards):
            target = size if index == n_shards - 1 else size * (index + 1) // n_shards
            source.seek(start)
            chunk = source.read(max(target - start, 0))
            if index < n_shards - 1:
                chunk += source.readline()  # finish the line the cut fell in
            shard = out_dir / f"{path.stem}.{index:03d}.txt"
            shard.write_bytes(chunk)
            shards.append(shard)
            start += len(chunk)
    return shards


def parse_triples(batch):
    """Arrow batch of lines `h r t` -> columns head, relation, tail (int64)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    parts = pc.split_pattern(pc.utf8_trim_whitespace(batch["text"]), " ")
    column = [pc.cast(pc.list_element(parts, i), pa.int64()) for i in range(3)]
    return pa.table({"head": column[0], "relation": column[1], "tail": column[2]})


def parse_interactions(batch):
    """Arrow batch of lines `user item item ...` -> one (user, item) row per item."""
    import pyarrow as pa
    import pyarrow.compute as pc

    parts = pc.split_pattern(pc.utf8_trim_whitespace(batch["text"]), " ")
    users = pc.cast(pc.list_element(parts, 0), pa.int64())
    items = pc.list_slice(parts, 1)
    owner = pc.list_parent_indices(items)
    flat = pc.cast(pc.list_flatten(items), pa.int64())
    return pa.table({"user": pc.take(users, owner), "item": flat})


def remap(batch, tables):
    """Each id column replaced by its position in the sorted distinct ids (the id maps)."""
    import numpy as np

    out = dict(batch)
    for column, table in tables.items():
        out[column] = np.searchsorted(table, batch[column]).astype(np.int64)
    return out


def distinct(dataset, columns: list[str]):
    """Sorted distinct values over `columns` of a Ray dataset: each block's distinct values in
    parallel, merged in the driver (the id tables are small; Ray Data's own `unique`, a hash
    shuffle, took 3.5 s per column on 100k rows here, this 1.2 s)."""
    import numpy as np

    def block_distinct(batch):
        return {"id": np.unique(np.concatenate([batch[c] for c in columns]))}

    blocks = dataset.map_batches(block_distinct, batch_format="numpy", batch_size=None)
    parts = [b["id"] for b in blocks.iter_batches(batch_format="numpy", batch_size=None)]
    return np.unique(np.concatenate(parts))


def ray_data_ingest(raw: Path, out: Path, cpus: int, scratch: Path) -> dict:
    """The Ray Data pipeline of the module docstring; its timings."""
    import ray

    start = time.perf_counter()
    ray.init(
        address="local", num_cpus=cpus, include_dashboard=False, _temp_dir=os.environ["TMPDIR"],
        log_to_driver=False,
    )  # fmt: skip
    started = time.perf_counter()
    import ray.data

    ray.data.DataContext.get_current().enable_progress_bars = False
    shard_dir = scratch / "shards"
    shard_dir.mkdir(parents=True, exist_ok=True)
    shards = {name: shard_lines(raw / name, shard_dir, 2 * cpus) for name in KGAT_FILES}
    sharded = time.perf_counter()
    triples = ray.data.read_text([str(p) for p in shards["kg_final.txt"]]).map_batches(
        parse_triples, batch_format="pyarrow"
    )
    pairs = {
        split: ray.data.read_text([str(p) for p in shards[f"{split}.txt"]]).map_batches(
            parse_interactions, batch_format="pyarrow"
        )
        for split in ("train", "valid", "test")
    }
    triples = triples.materialize()
    pairs = {split: ds.materialize() for split, ds in pairs.items()}
    parsed = time.perf_counter()
    entities = distinct(triples, ["head", "tail"])
    relations = distinct(triples, ["relation"])
    users = distinct(pairs["train"], ["user"])
    entity_ref, relation_ref, user_ref = ray.put(entities), ray.put(relations), ray.put(users)
    aggregated = time.perf_counter()

    def triple_maps(batch):
        entities = ray.get(entity_ref)
        return remap(
            batch, {"head": entities, "tail": entities, "relation": ray.get(relation_ref)}
        )

    def pair_maps(batch):
        return remap(batch, {"user": ray.get(user_ref), "item": ray.get(entity_ref)})

    triples.map_batches(triple_maps, batch_format="numpy").write_parquet(str(out / "triples"))
    for split, dataset in pairs.items():
        dataset.map_batches(pair_maps, batch_format="numpy").write_parquet(str(out / split))
    written = time.perf_counter()
    counts = {
        "n_triples": triples.count(),
        "n_interactions": sum(ds.count() for ds in pairs.values()),
        "n_entities": len(entities),
        "n_users": len(users),
    }
    ray.shutdown()
    return {
        "startup_seconds": started - start,
        "shard_seconds": sharded - started,
        "parse_seconds": parsed - sharded,
        "aggregate_seconds": aggregated - parsed,
        "remap_write_seconds": written - aggregated,
        "seconds": written - sharded,
        **counts,
    }


# -- the driver ------------------------------------------------------------------------------------


def process_tree_rss(root: int) -> int:
    """Resident bytes of `root` and all its descendants (psutil, which Ray itself depends on)."""
    import psutil

    try:
        process = psutil.Process(root)
        tree = [process, *process.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for member in tree:
        try:
            total += member.memory_info().rss
        except psutil.NoSuchProcess:  # ended between the listing and the reading
            continue
    return total


def run_ray_child(raw: Path, out: Path, cpus: int, scratch: Path) -> dict:
    """The Ray Data pipeline in a child process, its process tree's memory sampled meanwhile. Ray's
    own files go to a short dir under /tmp: its socket paths must stay under 108 bytes."""
    result = scratch / "ray_result.json"
    ray_tmp = tempfile.mkdtemp(prefix="tinykg-ray-", dir="/tmp")
    command = [sys.executable, "-m", "benchmarks.bench_ray_ingest", "--ray-child", str(raw),
               str(out), str(cpus), str(scratch), str(result)]  # fmt: skip
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "TMPDIR": ray_tmp}
    child = subprocess.Popen(command, cwd=REPO_ROOT, env=env)
    peak, done = [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], process_tree_rss(child.pid))
            done.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    code = child.wait()
    done.set()
    sampler.join()
    shutil.rmtree(ray_tmp, ignore_errors=True)
    if code != 0:
        raise RuntimeError(f"the Ray Data child failed (exit {code}); see its output above")
    return {**json.loads(result.read_text()), "peak_rss_bytes": peak[0]}


def report(size: str, cpus: int, streaming: dict, ray_run: dict, load: tuple[float, float]) -> str:
    raw_mb = streaming["raw_bytes"] / 1e6
    rows = [
        ["streaming ingest (`pipelines.ingest`)", f"{streaming['ingest_seconds']:.1f}", "",
         f"{raw_mb / streaming['ingest_seconds']:.1f}", f"{streaming['peak_rss_bytes'] / 2**20:,.0f}",
         f"{streaming['n_triples']:,}", f"{streaming['n_interactions']:,}"],
        [f"Ray Data, {cpus} CPUs (parse, distinct ids, remap, write)", f"{ray_run['seconds']:.1f}",
         f"{ray_run['startup_seconds']:.1f} + {ray_run['shard_seconds']:.1f}",
         f"{raw_mb / ray_run['seconds']:.1f}", f"{ray_run['peak_rss_bytes'] / 2**20:,.0f}",
         f"{ray_run['n_triples']:,}", f"{ray_run['n_interactions']:,}"],
    ]  # fmt: skip
    table = markdown_table(
        ["pipeline", "seconds", "start-up + sharding s (not counted)", "MB/s", "peak RSS MiB",
         "triples", "interactions"],
        rows,
    )  # fmt: skip
    ratio = ray_run["seconds"] / streaming["ingest_seconds"]
    phases = ", ".join(
        f"{name} {ray_run[key]:.1f} s"
        for name, key in (("parse", "parse_seconds"), ("distinct ids", "aggregate_seconds"),
                          ("remap and write", "remap_write_seconds"))
    )  # fmt: skip
    return (
        f"Synthetic KGAT raw files of size {size} ({raw_mb:,.0f} MB of text, "
        f"{streaming['n_entities']:,} entities), each pipeline in a fresh child process on the "
        f"same machine, one after the other. Ray Data's pipeline does less than ingest (no "
        f"deduplication, split checks or validation): its time is a lower bound of a Ray Data "
        f"ingest of the same output. Ray Data's phases: {phases}. Load average (1 min) of the "
        f"machine when the run started: {load[0]:.2f}, at its end: {load[1]:.2f} (other work on "
        f"its cores slows both pipelines).\n\n{table}\n\n"
        f"- Ray Data / streaming ingest, seconds: **{ratio:.2f}x**; peak memory: "
        f"**{ray_run['peak_rss_bytes'] / streaming['peak_rss_bytes']:.2f}x**\n"
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_ray_ingest",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--size", default="100m", help="triples + interactions, e.g. 10m, 100m")
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray instance")
    parser.add_argument("--work-dir", type=Path, help="keep raw files and outputs here")
    parser.add_argument("--no-write", dest="write", action="store_false",
                        help="print, do not edit BENCHMARKS.md")  # fmt: skip
    parser.add_argument("--ray-child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.cpus < 1:
        parser.error("--cpus needs to be at least 1")
    try:
        args.preset = parse_size_preset(args.size)
    except ValueError as exc:
        parser.error(str(exc))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.ray_child:
        raw, out, cpus, scratch, result = args.ray_child
        timings = ray_data_ingest(Path(raw), Path(out), int(cpus), Path(scratch))
        Path(result).write_text(json.dumps(timings))
        return 0
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench_ray_ingest_") as tmp:
        work = args.work_dir or Path(tmp)
        raw = work / f"raw-{args.preset.name}"
        if not (raw / "kg_final.txt").is_file():
            print(f"generating {args.preset.name} ...", flush=True)
            raw.mkdir(parents=True, exist_ok=True)
            generate(args.preset, raw)
        print("streaming ingest ...", flush=True)
        streaming = ingest(args.preset, raw, work / "ingested")
        print("Ray Data ...", flush=True)
        scratch = work / "ray-scratch"
        scratch.mkdir(parents=True, exist_ok=True)
        ray_run = run_ray_child(raw, work / "ray-out", args.cpus, scratch)
    body = report(args.preset.name, args.cpus, streaming, ray_run, (load_start, os.getloadavg()[0]))
    print(body)
    section = section_name("ingest", "cpu", f"ray-data-{args.preset.name}")
    title = f"Ingest: streaming against Ray Data ({args.preset.name}, CPU)"
    publish_section(section, title, body, write=args.write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
