"""The plane-mask passes' calls into the native library (`planes.cpp`): the LeakyReLU pair and
dropout, forward and backward, torch's values bit for bit."""

from __future__ import annotations

import torch

from tinykg_kernels.native import library


def planes_applies(x: torch.Tensor) -> bool:
    """Whether the plane-mask passes (`leaky_pair`, `dropout_*`) run natively on `x`: a float32
    CPU tensor of whole planes (a multiple of 8 elements), and the library available."""
    return (
        x.device.type == "cpu"
        and x.dtype == torch.float32
        and x.numel() % 8 == 0
        and x.numel() > 0
        and library.available()
    )


def _mask_for(x: torch.Tensor) -> torch.Tensor:
    return torch.empty(x.numel() // 8, dtype=torch.uint8)


def leaky_pair(
    a: torch.Tensor, b: torch.Tensor, slope: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`tinykg_kernels.leaky_relu_pair` for tensors `planes_applies` accepts (same shape)."""
    a, b = a.contiguous(), b.contiguous()
    out, mask_a, mask_b = torch.empty_like(a), _mask_for(a), _mask_for(a)
    library.load().tinykg_leaky_pair(
        a.data_ptr(), b.data_ptr(), a.numel(), slope, out.data_ptr(), mask_a.data_ptr(),
        mask_b.data_ptr(),
    )  # fmt: skip
    return out, mask_a, mask_b


def leaky_pair_backward(
    grad: torch.Tensor,
    mask_a: torch.Tensor,
    mask_b: torch.Tensor,
    slope: float,
    want: tuple[bool, bool] = (True, True),
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """`tinykg_kernels.leaky_relu_pair_backward` for a gradient `planes_applies` accepts; a
    gradient `want` leaves out is None, and no buffer is made for it (the loop then reads the
    wanted mask twice and writes both of its outputs, the same values, into one buffer)."""
    grad = grad.contiguous()
    if all(want):
        masks, outputs = (mask_a, mask_b), (torch.empty_like(grad), torch.empty_like(grad))
    else:
        mask = mask_a if want[0] else mask_b
        masks, outputs = (mask, mask), (torch.empty_like(grad),) * 2
    library.load().tinykg_leaky_pair_backward(
        grad.data_ptr(), masks[0].contiguous().data_ptr(), masks[1].contiguous().data_ptr(),
        grad.numel(), slope, outputs[0].data_ptr(), outputs[1].data_ptr(),
    )  # fmt: skip
    return tuple(out if wanted else None for out, wanted in zip(outputs, want, strict=True))


def leaky_pair_backward_range(
    grad: torch.Tensor, mask_a: torch.Tensor, mask_b: torch.Tensor, start: int, slope: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """`leaky_pair_backward` of elements `start:start + grad.numel()` of a tensor whose whole masks
    are `mask_a`, `mask_b` (a float32 CPU block)."""
    grad = grad.contiguous()
    grad_a, grad_b = torch.empty_like(grad), torch.empty_like(grad)
    library.load().tinykg_leaky_pair_backward_range(
        grad.data_ptr(), mask_a.contiguous().data_ptr(), mask_b.contiguous().data_ptr(),
        mask_a.numel(), start, grad.numel(), slope, grad_a.data_ptr(), grad_b.data_ptr(),
    )  # fmt: skip
    return grad_a, grad_b


def dropout_apply(
    x: torch.Tensor, noise: torch.Tensor, scale: float, out: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """`tinykg_kernels.apply_dropout_noise` for tensors `planes_applies` accepts (same shape); the
    product written into `out` when given (contiguous; `noise` itself is fine: each element is
    read before it is written)."""
    x, noise = x.contiguous(), noise.contiguous()
    out, kept = torch.empty_like(x) if out is None else out, _mask_for(x)
    library.load().tinykg_dropout_apply(
        x.data_ptr(), noise.data_ptr(), x.numel(), scale, out.data_ptr(), kept.data_ptr()
    )
    return out, kept


def dropout_backward(grad: torch.Tensor, kept: torch.Tensor, kept_value: float) -> torch.Tensor:
    """`tinykg_kernels.dropout_noise_backward` for a gradient `planes_applies` accepts."""
    grad = grad.contiguous()
    out = torch.empty_like(grad)
    library.load().tinykg_dropout_backward(
        grad.data_ptr(), kept.contiguous().data_ptr(), grad.numel(), kept_value, out.data_ptr()
    )
    return out
