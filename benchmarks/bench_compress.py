"""Activation memory and step time of a 3-layer KGAT-like stack at FP32 and INT8/4/2/1.

One real mini-batch of lfm1m-kgat: 1024 BPR (user, positive, negative) triples, their 3-hop
neighborhood in the collaborative KG drawn by `kg_data.NeighborSampler`. The stack (KGAT's layer
sizes 64 -> 64 -> 32 -> 16): per layer relation-aware attention over the sampled edges (edge scores,
LeakyReLU, edge softmax), attentive aggregation (`spmm`), the bi-interaction aggregator
(LeakyReLU(W1 (h + h_N)) + LeakyReLU(W2 (h * h_N))), message dropout and an L2-normalized output;
BPR on the concatenated layer outputs. Built from `tinykg_train.compress.ops` and run the way the
trainer runs it: under `compress_saved_tensors(config)` with an `ActivationMeter` inside.

    python -m benchmarks.bench_compress [--raw DIR] [--batch-size 1024] [--fanouts 10 5 5]

Every figure comes from one run on one batch; ratios compare numbers measured side by side.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from benchmarks._report import SHARED_DATA, markdown_table, publish_section, section_name
from tinykg_train.compress import (
    ActivationMeter,
    CompressionConfig,
    compress_saved_tensors,
    ops,
)
from tinykg_train.compress import modules as cm
from tinykg_train.compression_defaults import width_label

BITS = (32, 8, 4, 2, 1)
GOALS = {2: 10.0, 1: 16.0}


class AttentiveBiInteraction(nn.Module):
    """One KGAT-like layer over a sampled subgraph; returns (output, L2-normalized output)."""

    def __init__(
        self, d_in: int, d_out: int, num_relations: int, dropout: float, config: CompressionConfig
    ) -> None:
        super().__init__()
        self.config, self.dropout = config, dropout
        self.attention = nn.Parameter(torch.randn(2, d_in) / d_in**0.5)  # source, target halves
        self.relation_attention = nn.Parameter(torch.zeros(num_relations, 1))
        self.sum_linear = cm.Linear(d_in, d_out, config=config)
        self.bi_linear = cm.Linear(d_in, d_out, config=config)

    def forward(
        self, h: torch.Tensor, edge_index: torch.Tensor, relation: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        c, num_nodes = self.config, h.shape[0]
        src, dst = edge_index
        halves = ops.linear(h, self.attention, config=c)  # [N, 2]
        scores = (
            ops.embedding(halves, src, config=c)[:, 0]
            + ops.embedding(halves, dst, config=c)[:, 1]
            + ops.embedding(self.relation_attention, relation, config=c)[:, 0]
        )
        alpha = ops.edge_softmax(ops.leaky_relu(scores, 0.2, config=c), dst, num_nodes, config=c)
        neighbors = ops.spmm(edge_index, h, num_nodes, alpha, config=c)
        summed = ops.leaky_relu(self.sum_linear(h + neighbors), 0.2, config=c)
        bi = ops.leaky_relu(self.bi_linear(ops.mul(h, neighbors, config=c)), 0.2, config=c)
        out = ops.dropout(summed + bi, self.dropout, self.training, config=c)
        return out, ops.l2_normalize(out, config=c)


class KGATLikeStack(nn.Module):
    """Node embeddings, `len(dims) - 1` attentive bi-interaction layers, BPR on the concatenation."""

    def __init__(
        self,
        num_nodes: int,
        num_relations: int,
        dims: Sequence[int],
        config: CompressionConfig,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        self.config = config
        self.embedding = nn.Parameter(torch.randn(num_nodes, dims[0]) * 0.1)
        self.layers = nn.ModuleList(
            AttentiveBiInteraction(d_in, d_out, num_relations, dropout, config)
            for d_in, d_out in zip(dims[:-1], dims[1:], strict=True)
        )

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        c = self.config
        h = ops.embedding(self.embedding, batch["node"], config=c)
        outputs = [h]
        for layer in self.layers:
            h, normalized = layer(h, batch["edge_index"], batch["relation"])
            outputs.append(normalized)
        final = torch.cat(outputs, dim=1)
        users, pos, neg = (ops.embedding(final, batch[k], config=c) for k in ("user", "pos", "neg"))
        pos_score = ops.mul(users, pos, config=c).sum(dim=1)
        neg_score = ops.mul(users, neg, config=c).sum(dim=1)
        return -F.logsigmoid(pos_score - neg_score).mean()


def load_batch(raw: Path, batch_size: int, fanouts: Sequence[int], seed: int) -> dict:
    """Ingest `raw`, build the CKG and sample one BPR batch's subgraph (local ids, int64)."""
    import kg_data
    from kg_data import CKG, BPRBatches, KGDataset, NeighborSampler

    with tempfile.TemporaryDirectory() as tmp:
        dataset = KGDataset.open(kg_data.ingest(raw, Path(tmp) / "ds", progress=False).path)
        ckg = CKG.from_dataset(dataset, cache=False)
        users, pos, neg = next(iter(BPRBatches(dataset, batch_size, seed).epoch(0)))
    user_nodes = users.numpy() + ckg.n_entities
    seeds, inverse = np.unique(
        np.concatenate([user_nodes, pos.numpy(), neg.numpy()]), return_inverse=True
    )
    sub = NeighborSampler(ckg, fanouts, seed=seed).sample(seeds).to_torch()
    local = torch.from_numpy(inverse).view(3, -1)  # seeds come first in the subgraph's node order
    return {
        "node": sub.node,
        "edge_index": sub.edge_index,
        "relation": sub.relation,
        "user": local[0],
        "pos": local[1],
        "neg": local[2],
        "num_nodes": ckg.num_nodes,
        "num_relations": ckg.num_relations,
        "sizes": (len(seeds), sub.num_nodes, sub.num_edges),
    }


def build_model(batch: dict, dims: Sequence[int], config: CompressionConfig) -> KGATLikeStack:
    torch.manual_seed(0)  # the same weights at every bit width
    return KGATLikeStack(batch["num_nodes"], batch["num_relations"], dims, config)


def measure_bytes(model: KGATLikeStack, batch: dict) -> ActivationMeter:
    """One training forward as the trainer measures it (compression hooks, meter inside)."""
    torch.manual_seed(1)
    with compress_saved_tensors(model.config), ActivationMeter(model) as meter:
        loss = model.loss(batch)
    assert loss.requires_grad  # the graph is alive: what it saved is what the meter counted
    return meter


def embedding_gradient(model: KGATLikeStack, batch: dict) -> torch.Tensor:
    """The embedding table's gradient with dropout off, so only compression tells widths apart."""
    model.eval()
    model.embedding.grad = None
    with compress_saved_tensors(model.config):
        loss = model.loss(batch)
    loss.backward()
    model.train()
    return model.embedding.grad.clone()


def interleaved_step_seconds(models: dict[int, KGATLikeStack], batch: dict, repeats: int) -> dict:
    """Median wall time of one optimizer step (forward, backward, Adam) per model, the models
    taking turns so that load from other processes hits them alike; one warm-up step each."""
    optimizers = {bits: torch.optim.Adam(m.parameters(), lr=1e-3) for bits, m in models.items()}
    times: dict[int, list[float]] = {bits: [] for bits in models}
    for _ in range(repeats + 1):
        for bits, model in models.items():
            start = time.perf_counter()
            optimizers[bits].zero_grad(set_to_none=True)
            with compress_saved_tensors(model.config):
                loss = model.loss(batch)
            loss.backward()
            optimizers[bits].step()
            times[bits].append(time.perf_counter() - start)
    return {bits: statistics.median(t[1:]) for bits, t in times.items()}


def relative_error(approx: torch.Tensor, exact: torch.Tensor) -> float:
    return float((approx - exact).norm() / exact.norm())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--raw", type=Path, default=SHARED_DATA / "lfm1m-kgat", help="raw KGAT dir to ingest"
    )
    parser.add_argument("--batch-size", type=int, default=1024, help="BPR triples (default 1024)")
    parser.add_argument(
        "--fanouts", type=int, nargs="+", default=[10, 5, 5], help="per hop (default 10 5 5)"
    )
    parser.add_argument(
        "--dims", type=int, nargs="+", default=[64, 64, 32, 16], help="embedding, layer sizes"
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed steps per width (default 5)")
    parser.add_argument(
        "--draws", type=int, default=8, help="gradient draws per width for the mean (default 8)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-write", action="store_true", help="print, do not edit BENCHMARKS.md")
    args = parser.parse_args(argv)
    if not args.raw.is_dir():
        print(f"raw data not found at {args.raw}: pass --raw DIR", file=sys.stderr)
        return 2
    torch.set_num_threads(max(torch.get_num_threads(), 1))

    batch = load_batch(args.raw, args.batch_size, args.fanouts, args.seed)
    seeds, nodes, edges = batch["sizes"]
    print(f"subgraph: {seeds} seeds, {nodes} nodes, {edges} edges", flush=True)

    results: dict[int, dict] = {}
    for bits in BITS:
        model = build_model(batch, args.dims, CompressionConfig(bits=bits))
        meter = measure_bytes(model, batch)
        draws = [embedding_gradient(model, batch) for _ in range(1 if bits == 32 else args.draws)]
        results[bits] = {"meter": meter, "grad": draws[0], "mean": torch.stack(draws).mean(0)}
        print(f"{width_label(bits)}: {meter.total_bytes / 2**20:.2f} MiB", flush=True)
    models = {bits: build_model(batch, args.dims, CompressionConfig(bits=bits)) for bits in (32, 2)}
    for bits, seconds in interleaved_step_seconds(models, batch, args.repeats).items():
        results[bits]["seconds"] = seconds
        print(f"{width_label(bits)}: {seconds * 1e3:.0f} ms/step", flush=True)

    fp32, exact = results[32]["meter"].total_bytes, results[32]["grad"]
    rows = []
    for bits in BITS:
        held = results[bits]["meter"].total_bytes
        ratio = fp32 / held
        goal = GOALS.get(bits)
        rows.append(
            [
                "FP32" if bits == 32 else f"INT{bits}",
                f"{held / 2**20:.2f}",
                f"{ratio:.1f}x",
                "" if goal is None else f">= {goal:g}x: {'met' if ratio >= goal else 'MISSED'}",
                "0" if bits == 32 else f"{relative_error(results[bits]['grad'], exact):.3f}",
                "0" if bits == 32 else f"{relative_error(results[bits]['mean'], exact):.3f}",
            ]
        )
    by_module = [results[32]["meter"].by_module(), results[2]["meter"].by_module()]
    module_rows = [
        [name or "(model)", f"{by_module[0].get(name, 0) / 2**10:.0f}", f"{held / 2**10:.0f}"]
        for name, held in sorted(by_module[1].items(), key=lambda item: -item[1])
    ]
    step_ratio = results[2]["seconds"] / results[32]["seconds"]
    body = "\n\n".join(
        [
            f"One lfm1m-kgat BPR batch of {args.batch_size} triples: {seeds} seed nodes, "
            f"fanouts {args.fanouts} -> a subgraph of {nodes:,} nodes and {edges:,} edges; "
            f"KGAT-like stack with dims {args.dims} (attention, edge softmax, spmm, bi-interaction "
            "linears, LeakyReLU, dropout 0.1, L2 norm; BPR on the concatenation). Bytes held for "
            "backward in one step as `ActivationMeter` counts them (parameters excluded, shared "
            "storages once), the ops and `compress_saved_tensors` at the same bit width. The "
            "gradient error: the embedding table's gradient against FP32's on the same batch "
            "(dropout off, so only the compression differs); stochastic rounding is unbiased, so "
            f"the mean of {args.draws} draws is ~sqrt({args.draws}) times closer than one.",
            markdown_table(
                [
                    "storage",
                    "MiB held",
                    "FP32 / this",
                    "goal",
                    "grad rel. error (1 step)",
                    f"error of the mean of {args.draws}",
                ],
                rows,
            ),
            f"Step time on CPU (forward + backward + Adam, median of {args.repeats}, interleaved): FP32 "
            f"{results[32]['seconds'] * 1e3:.0f} ms, INT2 {results[2]['seconds'] * 1e3:.0f} ms: "
            f"**INT2 / FP32 = {step_ratio:.2f}** (quantizing and dequantizing cost time on CPU; "
            "the Triton kernels run them on GPU).",
            "Where the INT2 bytes are (KiB, FP32 beside it):",
            markdown_table(["module", "FP32 KiB", "INT2 KiB"], module_rows),
        ]
    )
    print(body)
    publish_section(
        section_name("compress", "cpu", args.raw.name),
        "Compressed activations (tinykg_train.compress)",
        body,
        write=not args.no_write,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
