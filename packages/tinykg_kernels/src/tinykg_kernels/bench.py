"""Throughput of quantize / dequantize per bit width and backend: `python -m tinykg_kernels.bench`.

GB/s counts the bytes an operation must move: quantize reads `x` and writes the codes and
parameters (`x.nbytes + q.nbytes`); dequantize reads those and writes `x.nbytes`. On CUDA the same
run also times a device-to-device copy of `x` (reads and writes `x.nbytes` each), so every figure
can be read as a fraction of what the memory system delivers. CUDA timings are medians after
warm-up (`triton.testing.do_bench` when Triton is present, CUDA events otherwise); CPU timings are
medians of wall time.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from tinykg_kernels import dispatch, native
from tinykg_kernels.api import dequantize, quantize

GB = 1e9


@dataclass(frozen=True)
class Measurement:
    backend: str
    bits: int
    shape: tuple[int, ...]
    stochastic: bool
    quantize_s: float
    dequantize_s: float
    x_bytes: int
    q_bytes: int

    @property
    def ratio(self) -> float:
        return self.x_bytes / self.q_bytes

    @property
    def quantize_gbps(self) -> float:
        return (self.x_bytes + self.q_bytes) / self.quantize_s / GB

    @property
    def dequantize_gbps(self) -> float:
        return (self.x_bytes + self.q_bytes) / self.dequantize_s / GB

    def cells(self, copy: float | None = None) -> list[str]:
        """backend, bits, rounding, x / q bytes, the two GB/s and, with `copy`, their fractions."""
        row = [
            self.backend,
            str(self.bits),
            "stochastic" if self.stochastic else "nearest",
            f"{self.ratio:.2f}",
            f"{self.quantize_gbps:.2f}",
            f"{self.dequantize_gbps:.2f}",
        ]
        if copy:
            row += [f"{self.quantize_gbps / copy:.2f}", f"{self.dequantize_gbps / copy:.2f}"]
        return row


HEADERS = ["backend", "bits", "rounding", "x / q bytes", "quantize GB/s", "dequantize GB/s"]
COPY_HEADERS = ["quantize / copy", "dequantize / copy"]


def median_seconds(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    """Median time of `fn()` after a warm-up call, timed the right way for `device`."""
    if device.type != "cuda":
        fn()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return statistics.median(times)
    if dispatch.with_triton():
        from triton.testing import do_bench

        return do_bench(fn, warmup=25, rep=max(repeats, 1) * 20, return_mode="median") / 1e3
    fn()
    torch.cuda.synchronize(device)
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize(device)
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def measure(
    x: torch.Tensor, bits: int, backend: str, repeats: int, stochastic: bool = True
) -> Measurement:
    """Time quantize (without the NaN check's device sync) and dequantize of `x` on `backend`."""
    q = quantize(x, bits=bits, stochastic=stochastic, seed=0, backend=backend, check_finite=False)
    run_quantize = lambda: quantize(  # noqa: E731
        x, bits=bits, stochastic=stochastic, seed=0, backend=backend, check_finite=False
    )
    quantize_s = median_seconds(run_quantize, x.device, repeats)
    dequantize_s = median_seconds(lambda: dequantize(q, backend=backend), x.device, repeats)
    return Measurement(
        backend, bits, tuple(x.shape), stochastic, quantize_s, dequantize_s, x.nbytes, q.nbytes
    )


def copy_gbps(x: torch.Tensor, repeats: int) -> float:
    """Bandwidth of `y.copy_(x)` (bytes read + written per second)."""
    y = torch.empty_like(x)
    return 2 * x.nbytes / median_seconds(lambda: y.copy_(x), x.device, repeats) / GB


def backends_for(device: torch.device) -> list[str]:
    """torch everywhere; Triton too on CUDA when it is importable; on CPU the native loops when
    their library loads and inductor's unless compiling failed in this process."""
    if device.type == "cuda":
        return ["torch", "triton"] if dispatch.with_triton() else ["torch"]
    cpu = ["cpu-native"] if native.available() else []
    return ["torch", *cpu, *([] if dispatch.cpu_ops().failure() else ["cpu-inductor"])]


def table(measurements: list[Measurement], copy: float | None = None) -> str:
    """A markdown table; with `copy` (GB/s), each bandwidth also as a fraction of it."""
    headers = [*HEADERS, *(COPY_HEADERS if copy else [])]
    lines = ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
    lines += ["| " + " | ".join(m.cells(copy)) + " |" for m in measurements]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tinykg_kernels.bench",
        description="GB/s of quantize and dequantize per bit width and backend, and x.nbytes / q.nbytes.",
    )
    parser.add_argument(
        "--rows", type=int, default=262_144, help="rows of the [rows, cols] float32 input"
    )
    parser.add_argument("--cols", type=int, default=64, help="row length (one group per row)")
    parser.add_argument("--bits", type=int, nargs="+", default=[1, 2, 4, 8], choices=[1, 2, 4, 8])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--backends",
        nargs="+",
        choices=list(dispatch.RUNNING_BACKENDS),
        help="default: all usable on the device",
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per figure (median)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    x = torch.randn(args.rows, args.cols, device=device)
    results = [
        measure(x, bits, backend, args.repeats)
        for backend in args.backends or backends_for(device)
        for bits in args.bits
    ]
    copy = copy_gbps(x, args.repeats)
    print(f"input [{args.rows}, {args.cols}] float32 on {device}; a copy of it: {copy:.1f} GB/s")
    print(table(results, copy))


if __name__ == "__main__":
    main()
