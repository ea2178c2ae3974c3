"""The kernels compile for a real GPU (sm_90, H100), not only in the interpreter.

Triton compiles to PTX and cubin without a GPU (ptxas ships with the wheel), so this runs on any
machine: a subprocess without TRITON_INTERPRET builds the launchers' real arguments and compiles
them as a launch would (same constexprs, 16-divisibility hints for aligned pointers and sizes). The
PTX is also checked for what the design relies on: wide vector loads on whole tiles, NaN-propagating
min/max, IEEE division and no FMA contraction (bit-exact parity with the torch reference).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")

SCRIPT = r"""
import json, re, torch, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from tinykg_kernels import triton_ops as ops
from tinykg_kernels.packing import GroupLayout

assert not ops.INTERPRETED
TYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64",
         torch.uint8: "u8", torch.int16: "i16"}

def compile_launch(launch):
    signature, attrs = {}, {}
    for i, (name, arg) in enumerate(zip(launch.kernel.arg_names, launch.args)):
        if isinstance(arg, torch.Tensor):
            signature[name], attrs[(i,)] = "*" + TYPES[arg.dtype], [["tt.divisibility", 16]]
        elif isinstance(arg, float):
            signature[name] = "fp32"
        else:
            signature[name] = "i64" if abs(arg) >= 2**31 else "i32"
            if arg % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
    signature.update({name: "constexpr" for name in launch.constants})
    source = ASTSource(launch.kernel, signature, constexprs=launch.constants, attrs=attrs)
    options = {"num_warps": ops.NUM_WARPS, "enable_fp_fusion": False}
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options).asm["ptx"]

def quantize_case(shape, group_size, bits, scheme, dtype, param, noise_mode):
    layout = GroupLayout.for_shape(shape, group_size, bits)
    flat = torch.zeros(layout.numel, dtype=dtype)
    outputs = (torch.zeros((layout.n_groups, layout.bytes_per_group), dtype=torch.uint8),
               torch.zeros(layout.n_groups, dtype=param), torch.zeros(layout.n_groups, dtype=param))
    noise = torch.zeros(layout.numel) if noise_mode == "tensor" else None
    seed = 1234 if noise_mode == "philox" else None
    return ops.quantize_launch(flat, layout, scheme, param, outputs, seed=seed, noise=noise)

def dequantize_case(shape, bits, scheme, dtype, param):
    layout = GroupLayout.for_shape(shape, None, bits)
    codes = torch.zeros((layout.n_groups, layout.bytes_per_group), dtype=torch.uint8)
    scale = torch.zeros(layout.n_groups, dtype=param)
    return ops.dequantize_launch(codes, scale, scale, layout, scheme, torch.zeros(layout.numel, dtype=dtype))

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
cases = {
    "quantize int2 philox [4096,64]": quantize_case((4096, 64), None, 2, "uniform", F32, BF16, "philox"),
    "quantize int2 normal [4096,64]": quantize_case((4096, 64), None, 2, "normal", F32, BF16, "philox"),
    "quantize int1 bf16 noise tensor [33,70]": quantize_case((33, 70), None, 1, "uniform", BF16, F16, "tensor"),
    "quantize int4 two-pass [3,100000]": quantize_case((3, 100_000), None, 4, "uniform", F32, F32, None),
    "quantize int8 blocks [1000]": quantize_case((1000,), 64, 8, "uniform", torch.float64, BF16, "philox"),
    "dequantize int2 [4096,64]": dequantize_case((4096, 64), 2, "uniform", F32, BF16),
    "dequantize int8 bf16 out [33,70]": dequantize_case((33, 70), 8, "uniform", BF16, F16),
    "dequantize normal fp16 out [64,64]": dequantize_case((64, 64), 2, "normal", F16, torch.float32),
}
report = {}
for name, launch in cases.items():
    ptx = compile_launch(launch)
    report[name] = {
        "single_chunk": launch.constants.get("SINGLE_CHUNK"),
        "masked": launch.constants["MASKED"],
        "v4_loads": len(re.findall(r"ld\.global(?:\.[a-z]+)*\.v4", ptx)),
        "v4_stores": len(re.findall(r"st\.global(?:\.[a-z]+)*\.v4", ptx)),
        "nan_min": "min.NaN.f32" in ptx,
        "fma": len(re.findall(r"\bfma\.rn\.f32", ptx)),
        "div_rn": "div.rn.f32" in ptx,
    }

from tinykg_kernels import triton_planes as planes
from tinykg_kernels.triton_ops import Launch
x, mask = torch.zeros(4096 * 64), torch.zeros(4096 * 8, dtype=torch.uint8)
n, k = x.numel(), mask.numel()
block = {"BLOCK": planes.BLOCK}
plane_cases = {
    "leaky pair [4096,64]": Launch(planes._leaky_pair_kernel, (1,), (x, x, x, mask, mask, n, k, 0.2), block),
    "leaky pair [5]: one byte per plane": Launch(planes._leaky_pair_kernel, (1,), (x, x, x, mask, mask, 5, 1, 0.2), block),
    "leaky pair backward, both": Launch(planes._leaky_pair_backward_kernel, (1,), (x, mask, mask, x, x, n, 0, k, 0.2), {"WANT_A": True, "WANT_B": True, **block}),
    "leaky pair backward, one": Launch(planes._leaky_pair_backward_kernel, (1,), (x, mask, mask, x, x, n, 4096, k, 0.2), {"WANT_A": False, "WANT_B": True, **block}),
    "dropout scaled": Launch(planes._dropout_kernel, (1,), (x, x, x, mask, n, k, 1.25), {"SCALED": True, **block}),
    "dropout backward": Launch(planes._dropout_backward_kernel, (1,), (x, mask, x, n, k, 1.25), block),
}
for name, launch in plane_cases.items():
    ptx = compile_launch(launch)
    report[name] = {"plane": True, "fma": len(re.findall(r"\bfma\.rn\.f32", ptx))}
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def ptx_report() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=600
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_every_kernel_variant_compiles_for_sm90(ptx_report):
    assert len(ptx_report) == 14
    assert sum(1 for report in ptx_report.values() if report.get("plane")) == 6
    assert not ptx_report["quantize int4 two-pass [3,100000]"]["single_chunk"]


def test_whole_tiles_take_the_unmasked_wide_load_path(ptx_report):
    quantize = ptx_report["quantize int2 philox [4096,64]"]
    assert not quantize["masked"] and quantize["v4_loads"] >= 8
    dequantize = ptx_report["dequantize int2 [4096,64]"]
    assert not dequantize["masked"] and dequantize["v4_stores"] >= 8


def test_quantize_keeps_the_reference_arithmetic(ptx_report):
    for name, report in ptx_report.items():
        assert report["fma"] == 0, f"{name}: FMA contraction would break bit parity with torch"
        if name.startswith("quantize"):
            assert report["nan_min"], f"{name}: min/max must propagate NaN to flag bad groups"
            assert report["div_rn"], f"{name}: 1 / scale must be the IEEE division torch does"
