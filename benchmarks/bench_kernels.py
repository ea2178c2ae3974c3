"""Quantize / dequantize throughput of tinykg_kernels, written to BENCHMARKS.md.

    python -m benchmarks.bench_kernels              # CPU section; the CUDA section too on a GPU
    python -m benchmarks.bench_kernels --skip-cpu   # the CUDA section only

- `kernels-cpu`: the torch path and the compiled codec on `[rows, 64]` float32 per bit width and
  thread count: GB/s, each as a fraction of a copy of the same tensor, and `x.nbytes / q.nbytes`;
  at INT2 the compiled codec's native loops against its inductor loops; the native CSR product
  against torch's.
- `kernels-cuda`: Triton vs torch on `[4M, 64]` float32, and each bandwidth as a fraction of a
  device-to-device copy of the same tensor timed in the same run (goal: >= 0.8 at INT2).

GB/s counts bytes read plus bytes written (`x.nbytes + q.nbytes` for both directions); a copy
moves `2 * x.nbytes`. Quantize runs with `check_finite=False` (the NaN check adds one small
reduction over the scales and a device sync). Rounding is stochastic unless marked `nearest`.
"""

from __future__ import annotations

import argparse
import os
import warnings
from dataclasses import replace

import torch

from benchmarks._report import markdown_table, write_section
from tinykg_kernels import dispatch, native
from tinykg_kernels.bench import (
    COPY_HEADERS,
    HEADERS,
    backends_for,
    copy_gbps,
    measure,
    median_seconds,
)

BITS = [1, 2, 4, 8]
INDUCTOR = "compiled, inductor loops"  # the compiled backend with the native loops off


def cpu_section(rows: int, repeats: int, threads: list[int]) -> None:
    load_before = os.getloadavg()[0]
    x = torch.randn(rows, 64)
    table_rows, copies, by_key, csr_lines = [], [], {}, []
    for count in threads:
        torch.set_num_threads(count)
        copy = copy_gbps(x, repeats)
        copies.append(f"{copy:.2f} GB/s with {count} thread{'s' if count > 1 else ''}")
        runs = [(backend, bits, True) for backend in backends_for(x.device) for bits in BITS]
        if "compiled" in backends_for(x.device):
            runs.append(("compiled", 2, False))  # without the noise: what the noise hash costs
        for backend, bits, stochastic in runs:
            m = measure(x, bits, backend, repeats, stochastic=stochastic)
            by_key[(count, backend, bits, stochastic)] = m
            table_rows.append([count, *m.cells(copy)])
        if "compiled" in backends_for(x.device) and native.available():
            m = replace(
                without_native(lambda: measure(x, 2, "compiled", repeats)), backend=INDUCTOR
            )
            by_key[(count, INDUCTOR, 2, True)] = m
            table_rows.append([count, *m.cells(copy)])
            csr_lines.append(csr_product_line(count, repeats))
    load_after = os.getloadavg()[0]
    lines = [
        f"Input `[{rows:,}, 64]` float32 ({x.nbytes / 2**20:.0f} MiB), one group per row, 16-bit "
        f"scale and zero point; median of {repeats} runs after a warm-up, per torch thread count. "
        f"A copy of the same tensor into a preallocated one (bytes read + written): "
        f"{'; '.join(copies)}; quantize and dequantize allocate their outputs, whose first touch "
        "costs page faults a copy does not pay. `compiled` is "
        "the compiled codec (`auto` picks it for CPU tensors of 4,096+ elements): native C++ loops "
        "for float32 with bfloat16 parameters, inductor's (torch.compile) otherwise or with "
        f"`TINYKG_KERNELS_NATIVE=0` (the `{INDUCTOR}` rows; their first call per shape family "
        "compiles, outside the timing). Load average (1 min) at the start: "
        f"{load_before:.2f}, at the end: {load_after:.2f} (the machine is shared: other work on its "
        "cores slows every figure, multi-threaded runs most).",
        "",
        markdown_table(["threads", *HEADERS, *COPY_HEADERS], table_rows),
        "",
        f"- INT2 compression: **{by_key[(threads[0], 'torch', 2, True)].ratio:.1f}x** (goal >= 12x on "
        "`[N, 64]` float32).",
    ]
    for count in threads:
        if (count, INDUCTOR, 2, True) in by_key:
            fused, inductor = (
                by_key[(count, "compiled", 2, True)],
                by_key[(count, INDUCTOR, 2, True)],
            )
            lines.append(
                f"- INT2, {count} thread{'s' if count > 1 else ''}: the native loops (what "
                f"`compiled` runs for float32 with bfloat16 parameters) over inductor's "
                f"(`TINYKG_KERNELS_NATIVE=0`): quantize **{inductor.quantize_s / fused.quantize_s:.1f}x**, "
                f"dequantize **{inductor.dequantize_s / fused.dequantize_s:.1f}x** faster."
            )
    lines += csr_lines
    for count in threads:
        if (count, "compiled", 2, True) in by_key:
            eager, fused = by_key[(count, "torch", 2, True)], by_key[(count, "compiled", 2, True)]
            nearest = by_key[(count, "compiled", 2, False)]
            noise_share = 1 - nearest.quantize_s / fused.quantize_s
            lines.append(
                f"- INT2, {count} thread{'s' if count > 1 else ''}: compiled over torch path: "
                f"quantize **{eager.quantize_s / fused.quantize_s:.1f}x**, dequantize "
                f"**{eager.dequantize_s / fused.dequantize_s:.1f}x** faster; drawing the "
                f"rounding noise (the counter hash) is {noise_share:.0%} of the compiled quantize."
            )
    write_section("kernels-cpu", "Quantize / dequantize on CPU (tinykg_kernels)", "\n".join(lines))


def without_native(run):
    """`run()` with the native loops off (`TINYKG_KERNELS_NATIVE=0`): the compiled backend's
    inductor loops."""
    before = os.environ.get(native.NATIVE_ENV)
    os.environ[native.NATIVE_ENV] = "0"
    try:
        return run()
    finally:
        if before is None:
            del os.environ[native.NATIVE_ENV]
        else:
            os.environ[native.NATIVE_ENV] = before


def csr_product_line(threads: int, repeats: int) -> str:
    """`native.csr_matmul` against torch's CSR product on a random graph of KG size and degree."""
    nodes, degree, width = 65_536, 8, 64
    generator = torch.Generator().manual_seed(0)
    rows = torch.arange(nodes).repeat_interleave(degree)
    cols = torch.randint(0, nodes, (nodes * degree,), generator=generator)
    with warnings.catch_warnings():  # "CSR support is in beta state"
        warnings.simplefilter("ignore", UserWarning)
        entries = torch.rand(nodes * degree, generator=generator)
        matrix = torch.sparse_coo_tensor(
            torch.stack([rows, cols]), entries, (nodes, nodes), check_invariants=False
        )
        matrix = matrix.coalesce().to_sparse_csr()
    x = torch.randn(nodes, width, generator=generator)
    crow, col = matrix.crow_indices().int(), matrix.col_indices().int()
    cpu = torch.device("cpu")
    torch_s = median_seconds(lambda: matrix @ x, cpu, repeats)
    native_s = median_seconds(
        lambda: native.csr_matmul(crow, col, matrix.values(), x), cpu, repeats
    )
    return (
        f"- CSR product (`native.csr_matmul`, what `CSRGraph` runs on the CPU) against torch's, "
        f"{nodes:,} x {nodes:,} with {degree} entries a row, width {width}, {threads} "
        f"thread{'s' if threads > 1 else ''}: {native_s * 1e3:.2f} ms against "
        f"{torch_s * 1e3:.2f} ms (**{torch_s / native_s:.1f}x** faster)."
    )


def cuda_section(rows: int, repeats: int) -> None:
    device = torch.device("cuda")
    x = torch.randn(rows, 64, device=device)
    copy = copy_gbps(x, repeats)
    results = [
        measure(x, bits, backend, repeats) for backend in backends_for(device) for bits in BITS
    ]
    if dispatch.WITH_TRITON:
        results.append(measure(x, 2, "triton", repeats, stochastic=False))
    lines = [
        f"Input `[{rows:,}, 64]` float32 ({x.nbytes / 2**30:.2f} GiB) on "
        f"{torch.cuda.get_device_name(device)}; device-to-device copy of it: **{copy:.0f} GB/s** "
        f"(bytes read + written). Median of timed runs after warm-up (`triton.testing.do_bench`).",
        "",
        markdown_table([*HEADERS, *COPY_HEADERS], [m.cells(copy) for m in results]),
        "",
    ]
    by_key = {(m.backend, m.bits, m.stochastic): m for m in results}
    if ("triton", 2, True) in by_key:
        triton2 = by_key[("triton", 2, True)]
        lines.append(
            f"- INT2 Triton: quantize+pack **{triton2.quantize_gbps / copy:.2f}** of copy, "
            f"unpack+dequantize **{triton2.dequantize_gbps / copy:.2f}** of copy (goal >= 0.8)."
        )
        for bits in BITS:
            t, p = by_key[("triton", bits, True)], by_key[("torch", bits, True)]
            lines.append(
                f"- INT{bits} speed-up of Triton over torch: quantize "
                f"{p.quantize_s / t.quantize_s:.1f}x, dequantize {p.dequantize_s / t.dequantize_s:.1f}x."
            )
    else:
        lines.append("- Triton is not importable here: torch path only.")
    write_section(
        "kernels-cuda", "Quantize / dequantize on CUDA (tinykg_kernels)", "\n".join(lines)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu-rows", type=int, default=262_144)
    parser.add_argument("--cuda-rows", type=int, default=4 * 2**20)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--skip-cpu", action="store_true", help="only the CUDA section")
    parser.add_argument(
        "--threads", type=int, nargs="+", help="torch CPU thread counts (default: 1 and torch's)"
    )
    args = parser.parse_args()
    if not args.skip_cpu:
        threads = args.threads or sorted({1, torch.get_num_threads()})
        cpu_section(args.cpu_rows, args.repeats, threads)
    if torch.cuda.is_available():
        cuda_section(args.cuda_rows, args.repeats)
    elif args.skip_cpu:
        raise SystemExit("--skip-cpu needs a CUDA GPU: nothing to measure here")


if __name__ == "__main__":
    main()
