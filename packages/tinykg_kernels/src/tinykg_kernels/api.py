"""`quantize`, `dequantize` and `QuantizedTensor`: the public codec (contract in
docs/ARCHITECTURE.md).

A tensor is cut into groups (rows of its last dim, or blocks of `group_size` elements); each group
keeps a 16-bit zero point and scale and one `bits`-wide code per element, packed into bytes. The
math is in `reference.py`; `dispatch.py` decides whether Triton, the CPU loops (`cpu_ops.py`: native
C++ or inductor's) or plain torch runs it, and `usage.py` records what ran.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from tinykg_kernels import dispatch, reference, usage
from tinykg_kernels.packing import BIT_WIDTHS, GroupLayout

SCHEMES = ("uniform", "normal")
INPUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
_MAX_SEED = 2**63


@dataclass(frozen=True)
class QuantizedMeta:
    """Everything about a `QuantizedTensor` that is not a tensor (hashable, cheap to keep on a ctx)."""

    shape: torch.Size
    dtype: torch.dtype
    bits: int
    group_size: int | None
    scheme: str


@dataclass(frozen=True, eq=False)
class QuantizedTensor:
    """Packed codes `[n_groups, bytes_per_group]` uint8, per-group `scale` and `zero` (16-bit by
    default), and what is needed to rebuild the original tensor. `nbytes` counts every stored byte.

    For autograd: `ctx.save_for_backward(*q.tensors())`, keep `q.meta`, and rebuild in backward with
    `QuantizedTensor.from_tensors(meta, ctx.saved_tensors)`.
    """

    codes: torch.Tensor
    scale: torch.Tensor
    zero: torch.Tensor
    shape: torch.Size
    dtype: torch.dtype
    bits: int
    group_size: int | None
    scheme: str = "uniform"

    def __post_init__(self) -> None:
        # made once (every check and backend asks; a property would rebuild it each time)
        layout = GroupLayout.for_shape(self.shape, self.group_size, self.bits)
        object.__setattr__(self, "_layout", layout)
        n_groups = layout.n_groups
        expected = (n_groups, layout.bytes_per_group)
        if self.codes.shape != expected or self.codes.dtype != torch.uint8:
            raise ValueError(
                f"codes must be uint8 of shape {expected} for this meta "
                f"(got {self.codes.dtype} {tuple(self.codes.shape)}); pass the tensors of q.tensors()"
            )
        if self.scale.shape != (n_groups,) or self.zero.shape != (n_groups,):
            name, part = (
                ("scale", self.scale) if self.scale.shape != (n_groups,) else ("zero", self.zero)
            )
            raise ValueError(
                f"{name} must have shape ({n_groups},) (got {tuple(part.shape)}); "
                "pass the tensors of q.tensors() in order"
            )

    @property
    def layout(self) -> GroupLayout:
        return self._layout

    @property
    def meta(self) -> QuantizedMeta:
        return QuantizedMeta(self.shape, self.dtype, self.bits, self.group_size, self.scheme)

    @property
    def nbytes(self) -> int:
        """Every byte stored: packed codes, scales and zero points."""
        return sum(t.numel() * t.element_size() for t in self.tensors())

    @property
    def device(self) -> torch.device:
        return self.codes.device

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(codes, scale, zero): what `from_tensors` needs beside `meta`."""
        return self.codes, self.scale, self.zero

    @classmethod
    def from_tensors(
        cls, meta: QuantizedMeta, tensors: tuple[torch.Tensor, ...] | list[torch.Tensor]
    ) -> QuantizedTensor:
        codes, scale, zero = tensors
        return cls(
            codes, scale, zero, meta.shape, meta.dtype, meta.bits, meta.group_size, meta.scheme
        )

    def to(self, device: torch.device | str) -> QuantizedTensor:
        moved = [t.to(device) for t in self.tensors()]
        return QuantizedTensor.from_tensors(self.meta, moved)

    def dequantize(self, backend: str | None = None) -> torch.Tensor:
        return dequantize(self, backend=backend)

    def __repr__(self) -> str:
        return (
            f"QuantizedTensor(shape={tuple(self.shape)}, dtype={self.dtype}, bits={self.bits}, "
            f"group_size={self.group_size}, scheme={self.scheme!r}, nbytes={self.nbytes}, "
            f"device={self.device})"
        )


_NO_CONTEXT = contextlib.nullcontext()


def _without_grad() -> contextlib.AbstractContextManager:
    """`torch.no_grad()`, or nothing when grad mode is off already (as in an autograd Function's
    forward and backward, where the codec runs in training: entering `no_grad` costs more than a
    small tensor's codec work)."""
    return torch.no_grad() if torch.is_grad_enabled() else _NO_CONTEXT


def draw_seed() -> int:
    """A seed from torch's default generator, so `torch.manual_seed` makes quantization reproducible."""
    return int(torch.randint(0, 2**62, (1,)).item())


def default_scale_dtype(dtype: torch.dtype) -> torch.dtype:
    """float16 parameters for float16 inputs (every zero point exact), bfloat16 otherwise (no overflow)."""
    return torch.float16 if dtype == torch.float16 else torch.bfloat16


def _check_arguments(
    x: object,
    bits: object,
    group_size: object,
    scheme: object,
    seed: object,
    scale_dtype: object,
) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"quantize expects a torch.Tensor (got {type(x).__name__})")
    if x.dtype not in INPUT_DTYPES:
        raise TypeError(
            f"quantize expects a float32/float16/bfloat16/float64 tensor (got {x.dtype}); "
            "cast it first, e.g. x.float()"
        )
    if isinstance(bits, bool) or bits not in BIT_WIDTHS:
        raise ValueError(f"bits must be one of 1, 2, 4, 8 (got {bits!r})")
    if group_size is not None and (
        isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1
    ):
        raise ValueError(f"group_size must be a positive integer or None (got {group_size!r})")
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be 'uniform' or 'normal' (got {scheme!r})")
    if scheme == "normal" and bits != 2:
        raise ValueError(
            f"scheme='normal' supports bits=2 only (got bits={bits}); use scheme='uniform'"
        )
    if seed is not None and (
        isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < _MAX_SEED
    ):
        raise ValueError(f"seed must be None or an integer in [0, 2**63) (got {seed!r})")
    if scale_dtype is not None and scale_dtype not in reference.PARAM_DTYPES:
        raise ValueError(
            f"scale_dtype must be None, torch.bfloat16, torch.float16 or torch.float32 (got {scale_dtype!r})"
        )


def _nonfinite_message(x: torch.Tensor, scale: torch.Tensor, scale_dtype: torch.dtype) -> str:
    bad_groups = int(scale.isnan().sum())
    nonfinite = int((~torch.isfinite(x.float())).sum())
    where = f"{bad_groups} of {scale.numel()} groups of a tensor of shape {tuple(x.shape)}"
    if nonfinite:
        return (
            f"quantize got {nonfinite} NaN/Inf values (in {where}); fix the op that produced them, "
            "or pass check_finite=False to store those groups as NaN"
        )
    return (
        f"quantize: the range of {where} overflows scale_dtype={scale_dtype}; "
        "pass scale_dtype=torch.float32 (or torch.bfloat16)"
    )


def quantize(
    x: torch.Tensor,
    bits: int = 2,
    group_size: int | None = None,
    stochastic: bool = True,
    seed: int | None = None,
    scheme: str = "uniform",
    *,
    scale_dtype: torch.dtype | None = None,
    backend: str | None = None,
    check_finite: bool = True,
) -> QuantizedTensor:
    """Compress `x` to `bits`-wide codes per element plus a zero point and scale per group.

    - `group_size=None`: one group per row of the last dim; else blocks of `group_size` consecutive
      elements of the flattened tensor (the last block may be short).
    - `stochastic=True`: unbiased stochastic rounding, `E[dequantize(quantize(x))] == x`, with noise
      from `seed` (None draws one from torch's RNG). `False`: round to nearest, deterministic. The
      same seed gives the same codes on the same backend; backends draw their noise differently
      (Philox on Triton, a counter hash in the CPU loops, `torch.rand` on the torch path).
    - `scheme="normal"` (2 bits): levels fitted to a clipped normal (lower variance on bell-shaped
      groups); `"uniform"`: evenly spaced levels.
    - `scale_dtype`: dtype of the stored scale and zero point (default: float16 for float16 inputs,
      bfloat16 otherwise; float32 costs 4 more bytes per group and keeps any constant group exact).
    - `backend`: "auto" | "torch" | "cpu-native" | "cpu-inductor" | "triton" (default:
      `$TINYKG_KERNELS_BACKEND`, else "auto": Triton on CUDA, the native loops for CPU tensors of
      4,096+ elements, inductor's if those cannot be built, else torch; see `dispatch`).
    - `check_finite`: raise ValueError on NaN/Inf (one small reduction over the scales and one
      device sync); with False such groups are stored as NaN and dequantize to NaN.
    """
    _check_arguments(x, bits, group_size, scheme, seed, scale_dtype)
    param_dtype = scale_dtype or default_scale_dtype(x.dtype)
    layout = GroupLayout.for_shape(x.shape, group_size, bits)
    device = x.device
    chosen = dispatch.select_backend(device, backend, layout.numel)
    if stochastic and seed is None:
        seed = draw_seed()
    with _without_grad():
        if layout.numel == 0:
            codes = torch.empty((0, layout.bytes_per_group), dtype=torch.uint8, device=device)
            scale = torch.empty(0, dtype=param_dtype, device=device)
            zero = torch.empty(0, dtype=param_dtype, device=device)
        else:
            flat = x.reshape(-1)  # no autograd graph: grad mode is off here
            if chosen == "triton":
                codes, scale, zero = dispatch.triton_ops().quantize(
                    flat, layout, scheme, param_dtype, seed=seed if stochastic else None
                )
                usage.record("quantize", "triton")
            elif chosen in dispatch.CPU_BACKENDS:  # records which loops ran
                codes, scale, zero = dispatch.cpu_ops().quantize(
                    flat,
                    layout,
                    scheme,
                    param_dtype,
                    seed=seed if stochastic else None,
                    native_loops=chosen == "cpu-native",
                )
            else:
                usage.record("quantize", "torch")
                noise = None
                if stochastic:
                    generator = torch.Generator(device=device).manual_seed(seed)
                    noise = torch.rand(layout.numel, generator=generator, device=device)
                codes, scale, zero = reference.quantize(flat, layout, scheme, param_dtype, noise)
            if check_finite and bool(scale.isnan().any()):
                raise ValueError(_nonfinite_message(x, scale, param_dtype))
    return QuantizedTensor(codes, scale, zero, x.shape, x.dtype, bits, group_size, scheme)


def dequantize(q: QuantizedTensor, backend: str | None = None) -> torch.Tensor:
    """The tensor `q` was made from, approximately: same shape, dtype and device."""
    if not isinstance(q, QuantizedTensor):
        raise TypeError(f"dequantize expects a QuantizedTensor (got {type(q).__name__})")
    layout = q.layout
    chosen = dispatch.select_backend(q.device, backend, layout.numel)
    if layout.numel == 0:
        return torch.empty(q.shape, dtype=q.dtype, device=q.device)
    with _without_grad():
        if chosen == "triton":
            flat = dispatch.triton_ops().dequantize(*q.tensors(), layout, q.scheme, q.dtype)
            usage.record("dequantize", "triton")
        elif chosen in dispatch.CPU_BACKENDS:  # records which loops ran
            flat = dispatch.cpu_ops().dequantize(
                *q.tensors(), layout, q.scheme, q.dtype, native_loops=chosen == "cpu-native"
            )
        else:
            flat = reference.dequantize(*q.tensors(), layout, q.scheme, q.dtype)
            usage.record("dequantize", "torch")
    return flat.view(q.shape)
