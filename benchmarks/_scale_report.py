"""`bench_scale`'s report: the size presets' generator settings, the size x mode table, the largest
size each mode trains within the memory limit, and the figure of graph size against peak memory."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from benchmarks._report import markdown_table, mib

#: the training modes, each as the `pipelines.train` flags that make it (in the table's order)
MODES = {
    "fp32-whole": ["--bits", "32"],
    "int2-whole": ["--bits", "2"],
    "int2-sampled": ["--bits", "2", "--sampler", "neighbor"],
    "int2-partitioned": ["--bits", "2", "--partitions", "4"],
    "int2-offloaded": ["--bits", "2", "--sampler", "neighbor", "--offload-embeddings"],
}
# whole-graph FP32 and INT2 with the tables' Adam state compact (asked for by name, not defaults):
# each INT2 run has its FP32 baseline at the same state (`same_state_ratios`)
MODES.update(
    {
        f"{mode}-adam-{state}": [*MODES[mode], "--adam-state", state]
        for mode in ("fp32-whole", "int2-whole")
        for state in ("bfloat16", "rowwise")
    }
)
# sampled and offloaded INT2 with bfloat16 moments (CompactAdam; offloaded, RowTables')
MODES.update(
    {
        f"{mode}-adam-bfloat16": [*MODES[mode], "--adam-state", "bfloat16"]
        for mode in ("int2-sampled", "int2-offloaded")
    }
)
# sampled INT2 with the tables updated row by row (lazy Adam on the rows a step touched, no dense
# gradient or dense Adam pass over a table), with Adam's float32 moments or bfloat16 ones
MODES["int2-sampled-sparse-adam"] = [*MODES["int2-sampled"], "--sparse-adam"]
MODES["int2-sampled-sparse-adam-bfloat16"] = [
    *MODES["int2-sampled-sparse-adam"],
    "--adam-state",
    "bfloat16",
]
#: the modes a run measures unless `--modes` names others: the five the scale issue names
DEFAULT_MODES = ["fp32-whole", "int2-whole", "int2-sampled", "int2-partitioned", "int2-offloaded"]
#: what a size preset's number counts per entity: triples + interactions = 10 x entities
TRIPLES_AND_INTERACTIONS_PER_ENTITY = 10
#: mean interactions per user: with users = items = entities / 4 and 8 relations, the generator
#: writes ~3.7 triples per entity (after deduplication), so 25 per user brings the total to ~10
MEAN_USER_DEGREE = 25
N_RELATIONS = 8
_SUFFIX = {"k": 10**3, "m": 10**6, "b": 10**9}


@dataclass(frozen=True)
class SizePreset:
    """A synthetic graph of about `total` triples + interactions (`kg_data.synthetic`)."""

    name: str
    total: int

    @property
    def n_entities(self) -> int:
        return max(self.total // TRIPLES_AND_INTERACTIONS_PER_ENTITY, 40)

    def generator_kwargs(self, seed: int = 0) -> dict:
        """`write_synthetic_kgat`'s keywords: users = items = entities / 4, the rest extra entities."""
        quarter = self.n_entities // 4
        return dict(
            n_users=quarter, n_items=quarter, n_extra_entities=self.n_entities - quarter,
            n_relations=N_RELATIONS, mean_user_degree=min(MEAN_USER_DEGREE, quarter / 2), seed=seed,
        )  # fmt: skip


def parse_size_preset(text: str) -> SizePreset:
    """`100k`, `1m`, `10m`, `100m` (any number with a k, m or b suffix, or none): a ValueError that
    names the form otherwise."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmb]?)\s*", text.lower())
    if match is None or float(match.group(1)) <= 0:
        raise ValueError(
            f"a size is a count of triples + interactions like 100k or 1m (got {text!r})"
        )
    total = int(float(match.group(1)) * _SUFFIX.get(match.group(2), 1))
    if total < 400:
        raise ValueError(f"a size needs at least 400 triples + interactions (got {text!r})")
    return SizePreset(text.strip().lower(), total)


# -- report ------------------------------------------------------------------------------------------


def headline_bytes(result: dict) -> int:
    """A run's peak memory as the section shows it: the device's `max_memory_allocated` on CUDA,
    else the process's peak RSS."""
    cuda_peak = result.get("cuda_max_memory_allocated")
    return result["peak_rss_bytes"] if cuda_peak is None else cuda_peak


def cell_text(result: dict | None) -> str:
    """`peak MiB / s per step / fits` of one (size, mode) (`headline_bytes`), or `-` where it did
    not run."""
    if result is None:
        return "-"
    if not result["fits"]:
        return f"does not fit ({result.get('failure', 'out of memory')})"
    return f"{mib(headline_bytes(result), 0)} MiB / {result['seconds_per_step']:.2f} s / fits"


def largest_fitting(
    results: list[dict], sizes: list[str], modes: list[str]
) -> dict[str, str | None]:
    """Per mode, the largest size (in `sizes`' order) it trained within the limit, None if none."""
    best: dict[str, str | None] = {mode: None for mode in modes}
    for result in results:
        if result["fits"] and (
            best[result["mode"]] is None
            or sizes.index(result["size"]) > sizes.index(best[result["mode"]])
        ):
            best[result["mode"]] = result["size"]
    return best


def largest_text(mode: str, best: str | None, results: list[dict], sizes: list[str]) -> str:
    """`best` in bold, and the larger sizes `--budget-s` kept `mode` from (it may fit them too)."""
    tried = {r["size"] for r in results if r["mode"] == mode}
    start = 0 if best is None else sizes.index(best) + 1
    untried = [size for size in sizes[start:] if size not in tried]
    said = f"**{best or 'none'}**"
    return f"{said} ({', '.join(untried)} not run)" if untried else said


def results_table(results: list[dict], sizes: list[str], modes: list[str]) -> str:
    """Rows: sizes; columns: modes; cells: `cell_text`."""
    by_key = {(r["size"], r["mode"]): r for r in results}
    rows = [[size, *(cell_text(by_key.get((size, mode))) for mode in modes)] for size in sizes]
    return markdown_table(["size", *modes], rows)


def detail_table(results: list[dict]) -> str:
    """One row per run that fit: activation bytes and the CF step's peak and parts (metrics.json)."""
    rows = []
    for r in results:
        if not r["fits"]:
            continue
        cf = (r.get("memory_breakdown") or {}).get("cf", {})
        evaluation = (r.get("memory_breakdown") or {}).get("evaluation", {})
        parts = (
            "embedding_tables",
            "graph_buffers",
            "optimizer_state",
            "activations",
            "temporaries",
        )
        figures = [r["peak_rss_bytes"], r.get("cuda_max_memory_allocated"),
                   r.get("activation_bytes"), cf.get("peak"), evaluation.get("peak")]  # fmt: skip
        rows.append([
            r["size"], r["mode"], *(mib(n, 0) for n in figures),
            " / ".join(mib(cf.get(k), 0) for k in parts),
        ])  # fmt: skip
    headers = ["size", "mode", "peak RSS MiB", "CUDA max allocated MiB", "activation MiB",
               "CF step peak MiB", "evaluation peak MiB", "tables / graph / Adam / act / temp MiB"]  # fmt: skip
    return markdown_table(headers, rows)


#: Adam's state of a whole-graph mode, by the mode's suffix ("" is Adam's own float32 moments)
ADAM_STATES = {"": "float32", "-adam-bfloat16": "bfloat16", "-adam-rowwise": "rowwise"}


def same_state_ratios(results: list[dict], sizes: list[str]) -> str | None:
    """Whole-graph INT2's peak memory (`headline_bytes`) over FP32's at the same Adam state, one
    row per size and state where both fit; None where no pair ran. A compact state shrinks both
    widths' peaks by the same bytes, so INT2 at a compact state is compared with FP32 at that
    state, not with FP32's float32 Adam."""
    by_key = {(r["size"], r["mode"]): r for r in results if r["fits"]}
    rows = []
    for size in sizes:
        for suffix, state in ADAM_STATES.items():
            fp32 = by_key.get((size, f"fp32-whole{suffix}"))
            int2 = by_key.get((size, f"int2-whole{suffix}"))
            if fp32 is None or int2 is None:
                continue
            low, high = headline_bytes(int2), headline_bytes(fp32)
            rows.append([size, state, mib(high, 0), mib(low, 0), f"{low / high:.2f}"])
    if not rows:
        return None
    headers = ["size", "Adam state", "FP32 MiB", "INT2 MiB", "INT2 / FP32"]
    intro = "Whole-graph INT2 against FP32 at the same Adam state (`--adam-state`), peak memory:"
    return f"{intro}\n\n{markdown_table(headers, rows)}"


def ingest_table(ingests: list[dict]) -> str:
    rows = [
        [i["size"], f"{i['n_entities']:,}", f"{i['n_triples']:,}", f"{i['n_interactions']:,}",
         f"{i['raw_bytes'] / 1e6:,.1f}", f"{i['ingest_seconds']:.2f}",
         f"{i['raw_bytes'] / 1e6 / i['ingest_seconds']:,.1f}", mib(i["peak_rss_bytes"], 0)]
        for i in ingests
    ]  # fmt: skip
    headers = ["size", "entities", "triples", "interactions", "raw MB", "ingest s", "MB/s",
               "ingest peak RSS MiB"]  # fmt: skip
    return markdown_table(headers, rows)


def plot(
    results: list[dict], ingests: list[dict], modes: list[str], limit: int, path: Path
) -> Path:
    """Graph size (triples + interactions, log) against each mode's peak memory (log), runs that did
    not fit drawn as hollow markers at the limit; the limit as a dashed horizontal line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    size_of = {i["size"]: i["n_triples"] + i["n_interactions"] for i in ingests}
    fig, ax = plt.subplots(figsize=(6.5, 3.6), dpi=100)
    colors = plt.get_cmap("viridis")([i / max(len(modes) - 1, 1) for i in range(len(modes))])
    for index, (mode, color) in enumerate(zip(modes, colors, strict=True)):
        runs = sorted((r for r in results if r["mode"] == mode), key=lambda r: size_of[r["size"]])
        fit = [r for r in runs if r["fits"]]
        ax.plot([size_of[r["size"]] for r in fit], [headline_bytes(r) / 2**20 for r in fit],
                marker="o", color=color, label=mode)  # fmt: skip
        nudge = 1 + 0.05 * (index - (len(modes) - 1) / 2)  # side by side, not on top of each other
        over = [size_of[r["size"]] * nudge for r in runs if not r["fits"]]
        ax.scatter(over, [limit / 2**20] * len(over), marker="x", color=color, s=60)
    ax.axhline(limit / 2**20, color="black", linestyle="--", linewidth=1)
    ax.text(0.01, limit / 2**20, "memory limit", transform=ax.get_yaxis_transform(), va="bottom",
            fontsize=8)  # fmt: skip
    ax.set_ylim(top=limit / 2**20 * 1.25)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("triples + interactions")
    ax.set_ylabel("peak memory MiB")
    ax.set_title("Peak memory per training mode (x: did not fit)", fontsize=10)
    ax.legend(fontsize=7, loc="lower right", frameon=False)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def report(
    results: list[dict],
    ingests: list[dict],
    modes: list[str],
    settings: dict,
    figure: str | None,
    trainings: list[dict] | None = None,
) -> str:
    """The section's body: what was run, the ingest table, the size x mode table, the largest size
    per mode, the step details and the figure link."""
    sizes = [i["size"] for i in ingests]
    best = largest_fitting(results, sizes, modes)
    limit_text = settings["memory_limit_text"]
    per_step = (
        "seconds per CF step (the epoch's seconds, KGAT's KG steps and attention refresh included, "
        "over its CF steps) / fits"
    )
    held = (
        f"Each child's device memory is held to {limit_text}: it trains unconstrained, and a run "
        "fits when its `torch.cuda.max_memory_allocated` over the whole run (metrics.json's "
        "`cuda_max_memory_allocated`: tables, Adam state, graph, activations, temporaries and the "
        f"rankings) is within the limit. Cells: that device peak / {per_step}; the process's peak "
        "RSS (host memory) is in the detail table."
        if settings.get("device") == "cuda"
        else f"Each child's resident set is held to {limit_text}: a "
        "watchdog reads its resident high-water mark (`VmHWM`, which counts the child from its exec, "
        "not the forked copy of this process it began as) every 50 ms and kills the child once it "
        "passes the limit, so a run fits when its peak RSS is within the limit, as under a cgroup's "
        "memory limit (address space reserved but never touched does not count); a child over the "
        f"limit or failing to allocate is *does not fit*. Cells: the child's peak RSS (`VmHWM`) / "
        f"{per_step}."
    )
    stopped = (
        f" Stopped by `--budget-s {settings['budget_s']}`: a cell marked `-` did not run."
        if settings.get("stopped_by_budget")
        else ""
    )
    parts = [
        f"Synthetic KGs from `kg_data.synthetic` (users = items = entities / 4, {N_RELATIONS} "
        f"relations, {MEAN_USER_DEGREE} interactions per user on average), named by their triples + "
        "interactions. Ingest: `python -m pipelines.ingest` in a child process; MB/s is the raw text "
        "over the ingest's own seconds (its summary line), peak RSS the child's (its `VmHWM`).",
        ingest_table(ingests),
        f"Training: model **{settings['model']}**, each (size, mode) a fresh `python -m pipelines.train` "
        f"child (`--epochs 1 --max-batches-per-epoch {settings['steps']} --threads "
        f"{settings['threads']} --no-mlflow`{sets_text(settings)}, then the valid and test ranking{eval_users_text(settings)}), "
        f"the modes taking turns at each size. {held}{stopped}",
        results_table(results, sizes, modes),
        "Largest size trained within the limit: "
        + ", ".join(f"{mode} {largest_text(mode, best[mode], results, sizes)}" for mode in modes)
        + ".",
        "Per run that fit (metrics.json: `activation_bytes`; the CF step's and the valid ranking's "
        "`memory_breakdown` peaks, torch tensors only, and the CF step's parts):",
        detail_table(results),
    ]
    ratios = same_state_ratios(results, sizes)
    if ratios is not None:
        parts.append(ratios)
    parts.append(training_text(trainings or [], ingests, settings))
    if figure:
        parts.append(f"![graph size against peak memory per mode]({figure})")
    return "\n\n".join(parts)


def sets_text(settings: dict) -> str:
    """The settings `--set` gave every child (its `--config` file), as the report says them."""
    sets = settings.get("sets") or []
    if not sets:
        return ""
    return " and a `--config` file of " + ", ".join(f"`{setting}`" for setting in sets)


def eval_users_text(settings: dict) -> str:
    """How many users each ranking scored (`--eval-users`), as the report says it."""
    users = settings.get("eval_users") or 0
    if not users:
        return " of every user"
    return (
        f" of a seeded sample of at most {users:,} users per split (`--eval-users {users}`), each "
        "against every item"
    )


def training_text(trainings: list[dict], ingests: list[dict], settings: dict) -> str:
    """The full trainings at the largest size (`--train-epochs`): their test Recall@20 against the
    most-popular ranking's on the same users and a random ranking's (20 / items), or a line saying
    the check was not run."""
    epochs = settings.get("train_epochs") or 0
    if not epochs or not trainings:
        return (
            "Recall@20 check: not run (`--train-epochs 0`): the table shows what fits the limit, "
            "not what trains to a useful model."
        )
    items = {i["size"]: i["n_items"] for i in ingests}
    rows = [
        [t["size"], t["mode"], t["epochs"], f"{t['recall@20']:.4f}", f"{t['ndcg@20']:.4f}",
         popular_text(t), f"{20 / items[t['size']]:.6f}", mib(t["peak_rss_bytes"], 0),
         f"{t['minutes']:.1f}"]
        if t["fits"]
        else [t["size"], t["mode"], "-", f"does not fit ({t['failure']})", "-", "-", "-", "-", "-"]
        for t in trainings
    ]  # fmt: skip
    headers = ["size", "mode", "epochs", "test Recall@20", "test NDCG@20",
               "most popular Recall@20", "random Recall@20 ~", "peak RSS MiB", "minutes"]  # fmt: skip
    batches = settings.get("train_max_batches") or 0
    extent = f"the first {batches:,} CF batches of each" if batches else "every batch"
    return (
        f"Full training at the largest size, up to {epochs} epoch(s), {extent}, under the same "
        "limit, the valid ranking after each; test metrics of the best valid epoch (metrics.json). "
        "*most popular* ranks every user's unseen items by their training count "
        "(`tinykg_train.most_popular`) on the same users, the bar a model that learned nothing per "
        "user reaches; *random* is a random ranking's expected Recall@20 (20 / items), the floor:"
        "\n\n" + markdown_table(headers, rows)
    )


def popular_text(training: dict) -> str:
    """The most-popular ranking's test Recall@20 beside a training, or "-" where a run before
    this column did not measure it."""
    popular = training.get("popular_recall@20")
    return "-" if popular is None else f"{popular:.4f}"
