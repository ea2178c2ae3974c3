"""Quantize / dequantize throughput of tinykg_kernels, written to BENCHMARKS.md.

    python -m benchmarks.bench_kernels              # CPU section; the CUDA section too on a GPU
    python -m benchmarks.bench_kernels --skip-cpu   # the CUDA section only

- `kernels-cpu`: each CPU backend (`torch`, `cpu-native`, `cpu-inductor`) on `[rows, 64]` float32
  per bit width and thread count: GB/s, each as a fraction of a copy of the same tensor, and
  `x.nbytes / q.nbytes`; at INT2 the native loops against inductor's and against torch's path; the
  native CSR product against torch's.
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

import torch

from benchmarks._report import markdown_table, section_name, write_section
from tinykg_kernels import csr_matmul, dispatch
from tinykg_kernels.bench import (
    COPY_HEADERS,
    HEADERS,
    backends_for,
    copy_gbps,
    measure,
    median_seconds,
)

BITS = [1, 2, 4, 8]


def cpu_section(rows: int, repeats: int, threads: list[int]) -> None:
    load_before = os.getloadavg()[0]
    x = torch.randn(rows, 64)
    backends = backends_for(x.device)
    fastest = next(b for b in ("cpu-native", "cpu-inductor", "torch") if b in backends)
    table_rows, copies, by_key, csr_lines = [], [], {}, []
    for count in threads:
        torch.set_num_threads(count)
        copy = copy_gbps(x, repeats)
        copies.append(f"{copy:.2f} GB/s with {count} thread{'s' if count > 1 else ''}")
        runs = [(backend, bits, True) for backend in backends for bits in BITS]
        runs.append((fastest, 2, False))  # without the noise: what drawing it costs
        for backend, bits, stochastic in runs:
            m = measure(x, bits, backend, repeats, stochastic=stochastic)
            by_key[(count, backend, bits, stochastic)] = m
            table_rows.append([count, *m.cells(copy)])
        if "cpu-native" in backends:
            csr_lines.append(csr_product_line(count, repeats))
    load_after = os.getloadavg()[0]
    lines = [
        f"Input `[{rows:,}, 64]` float32 ({x.nbytes / 2**20:.0f} MiB), one group per row, 16-bit "
        f"scale and zero point; median of {repeats} runs after a warm-up, per torch thread count. "
        f"A copy of the same tensor into a preallocated one (bytes read + written): "
        f"{'; '.join(copies)}; quantize and dequantize allocate their outputs, whose first touch "
        "costs page faults a copy does not pay. Backends (`tinykg_kernels.dispatch`): `torch` the "
        "eager torch path; `cpu-native` the C++ loops of `tinykg_kernels.native` (what `auto` runs "
        "for CPU tensors of 4,096+ elements; float32 values with bfloat16 parameters, as here); "
        "`cpu-inductor` the same math fused by inductor (torch.compile; its first call per shape "
        "family compiles, outside the timing). Load average (1 min) at the start: "
        f"{load_before:.2f}, at the end: {load_after:.2f} (the machine is shared: other work on its "
        "cores slows every figure, multi-threaded runs most).",
        "",
        markdown_table(["threads", *HEADERS, *COPY_HEADERS], table_rows),
        "",
        f"- INT2 compression: **{by_key[(threads[0], 'torch', 2, True)].ratio:.1f}x** (goal >= 12x on "
        "`[N, 64]` float32).",
    ]
    for count in threads:
        plural = "s" if count > 1 else ""
        if (count, "cpu-inductor", 2, True) in by_key and (count, "cpu-native", 2, True) in by_key:
            native, inductor = (
                by_key[(count, "cpu-native", 2, True)],
                by_key[(count, "cpu-inductor", 2, True)],
            )
            lines.append(
                f"- INT2, {count} thread{plural}: cpu-native over cpu-inductor: quantize "
                f"**{inductor.quantize_s / native.quantize_s:.1f}x**, dequantize "
                f"**{inductor.dequantize_s / native.dequantize_s:.1f}x** faster."
            )
    lines += csr_lines
    for count in threads:
        if fastest == "torch":
            break
        plural = "s" if count > 1 else ""
        eager, fused = by_key[(count, "torch", 2, True)], by_key[(count, fastest, 2, True)]
        nearest = by_key[(count, fastest, 2, False)]
        noise_share = 1 - nearest.quantize_s / fused.quantize_s
        lines.append(
            f"- INT2, {count} thread{plural}: {fastest} over torch: quantize "
            f"**{eager.quantize_s / fused.quantize_s:.1f}x**, dequantize "
            f"**{eager.dequantize_s / fused.dequantize_s:.1f}x** faster; drawing the rounding noise "
            f"(the counter hash) is {noise_share:.0%} of the {fastest} quantize."
        )
    title = "Quantize / dequantize on CPU (tinykg_kernels)"
    write_section(section_name("kernels", "cpu"), title, "\n".join(lines))


def csr_product_line(threads: int, repeats: int) -> str:
    """`csr_matmul` on `cpu-native` against torch's CSR product on a random graph of KG size and
    degree."""
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
    torch_s = median_seconds(
        lambda: csr_matmul(crow, col, matrix.values(), x, "torch"), cpu, repeats
    )
    native_s = median_seconds(
        lambda: csr_matmul(crow, col, matrix.values(), x, "cpu-native"), cpu, repeats
    )
    return (
        f"- CSR product (`tinykg_kernels.csr_matmul`, what `CSRGraph` runs), cpu-native against "
        f"torch's, {nodes:,} x {nodes:,} with {degree} entries a row, width {width}, {threads} "
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
    if dispatch.with_triton():
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
    title = "Quantize / dequantize on CUDA (tinykg_kernels)"
    write_section(section_name("kernels", "cuda"), title, "\n".join(lines))


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
