"""`live_rows`: the mask of rows holding a nonzero value, natively and with torch's ops, equal to
`x.ne(0).any(dim=-1, keepdim=True)`; None when no row is all zero."""

from __future__ import annotations

import pytest
import torch

from tinykg_kernels import backend_usage, live_rows, native

BACKENDS = [
    "torch",
    pytest.param(
        "cpu-native",
        marks=pytest.mark.skipif(not native.available(), reason="no C++ compiler here"),
    ),
]


def reference(x: torch.Tensor) -> torch.Tensor:
    return x.ne(0).any(dim=-1, keepdim=True)


def rows_with_zeros(shape, generator) -> torch.Tensor:
    """Random rows, a third of them all zero (some -0.0), one with a NaN among zeros."""
    x = torch.randn(*shape, generator=generator)
    flat = x.view(-1, shape[-1])
    dead = torch.rand(flat.shape[0], generator=generator) < 1 / 3
    flat[dead] = 0.0
    flat[dead.nonzero()[::2, 0]] = -0.0
    flat[1] = 0.0
    flat[1, -1] = float("nan")
    return x


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "shape", [(300, 1), (40, 8), (2, 17, 32), (100, 60), (64, 70), (5, 3, 8, 1)]
)
def test_the_mask_equals_torch_s_comparison(backend, shape):
    generator = torch.Generator().manual_seed(sum(shape))
    x = rows_with_zeros(shape, generator)
    before = backend_usage()
    live = live_rows(x, backend=backend)
    assert live.dtype == torch.bool and live.shape == (*shape[:-1], 1)
    assert torch.equal(live, reference(x))
    ran = "cpu-native" if backend == "cpu-native" else "torch"
    assert backend_usage(since=before) == {"live_rows": {ran: 1}}


@pytest.mark.parametrize("backend", BACKENDS)
def test_none_when_every_row_holds_a_nonzero_value(backend):
    x = torch.randn(50, 24)
    x[:, :-1] = 0.0  # only the last column: each row still live
    assert live_rows(x, backend=backend) is None
    x[7] = -0.0
    assert torch.equal(live_rows(x, backend=backend), reference(x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_strided_view_reads_its_own_elements(backend):
    x = torch.randn(30, 40)
    x[:, ::2] = 0.0
    view = x[:, ::2]  # all zero, though its storage neighbours are not
    assert torch.equal(live_rows(view, backend), torch.zeros(30, 1, dtype=torch.bool))
    assert torch.equal(live_rows(x.T, backend), reference(x.T))  # the even columns: dead rows


def test_other_dtypes_take_torch_s_ops():
    x = torch.zeros(20, 16, dtype=torch.float64)
    x[3, 2] = 1.0
    before = backend_usage()
    assert torch.equal(live_rows(x), reference(x))
    assert backend_usage(since=before) == {"live_rows": {"torch": 1}}


def test_a_scalar_is_refused():
    with pytest.raises(ValueError, match="at least 1 dim"):
        live_rows(torch.tensor(1.0))
