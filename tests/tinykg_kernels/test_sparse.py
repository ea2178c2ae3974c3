"""`csr_matmul` and `csr_transposed_add_`: the dense products' values on every backend, the native
loops under `auto` for float32 CPU tensors of any size, torch's ops for what they lack, what ran
recorded."""

from __future__ import annotations

import pytest
import torch

from tinykg_kernels import backend_usage, csr_matmul, csr_transposed_add_, dispatch


def csr_case(index_dtype=torch.int32, dtype=torch.float32):
    generator = torch.Generator().manual_seed(3)
    dense = torch.rand(12, 9, generator=generator)
    dense[dense < 0.7] = 0
    csr = dense.to_sparse_csr()
    crow, col = csr.crow_indices().to(index_dtype), csr.col_indices().to(index_dtype)
    x = torch.randn(9, 5, generator=generator)
    return crow, col, csr.values().to(dtype), x.to(dtype), dense.to(dtype)


def test_every_backend_gives_the_dense_product_and_records_what_ran(backend, monkeypatch):
    monkeypatch.delenv(dispatch.BACKEND_ENV, raising=False)
    crow, col, values, x, dense = csr_case()
    before = backend_usage()
    out = csr_matmul(crow, col, values, x, backend=backend)
    torch.testing.assert_close(out, dense @ x, rtol=1e-5, atol=1e-6)
    ran = "cpu-native" if backend == "cpu-native" else "torch"  # no inductor loops for CSR
    assert backend_usage(since=before) == {"csr_matmul": {ran: 1}}


def test_auto_runs_the_native_product_for_a_small_float32_cpu_product(cpu_loops, monkeypatch):
    monkeypatch.delenv(dispatch.BACKEND_ENV, raising=False)
    crow, col, values, x, dense = csr_case()
    before = backend_usage()
    csr_matmul(crow, col, values, x)
    csr_matmul(*csr_case(dtype=torch.float64)[:4])  # float64: torch's product
    want = {"cpu-native": 1, "torch": 1} if cpu_loops == "cpu-native" else {"torch": 2}
    assert backend_usage(since=before) == {"csr_matmul": want}


def test_a_tensor_off_the_cpu_is_refused_by_a_cpu_backend():
    crow, col, values, x, _ = csr_case()
    with pytest.raises(RuntimeError, match="backend 'cpu-native' runs CPU tensors"):
        csr_matmul(crow, col, values, x.to("meta"), backend="cpu-native")


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("width", [5, 16, 64])
def test_blocks_of_rows_added_transposed_give_the_transposed_product(
    backend, monkeypatch, index_dtype, width
):
    """Every block of rows in order into zeros: `A^T @ g`, bit for bit the transposed matrix's
    `csr_matmul` on the native loops (the same sums in the same order)."""
    monkeypatch.delenv(dispatch.BACKEND_ENV, raising=False)
    generator = torch.Generator().manual_seed(4)
    dense = torch.rand(40, 30, generator=generator)
    dense[dense < 0.8] = 0
    dense[:, 3] = torch.rand(40, generator=generator)  # a column every row adds into
    csr = dense.to_sparse_csr()
    crow, col = csr.crow_indices().to(index_dtype), csr.col_indices().to(index_dtype)
    values, grad = csr.values(), torch.randn(40, width, generator=generator)
    before = backend_usage()
    out = torch.zeros(30, width)
    for start, stop in [(0, 7), (7, 8), (8, 8), (8, 40)]:  # an empty block too
        csr_transposed_add_(crow[start : stop + 1], col, values, grad[start:stop], out, backend)
    torch.testing.assert_close(out, dense.T @ grad, rtol=1e-5, atol=1e-5)
    ran = "cpu-native" if backend == "cpu-native" else "torch"
    assert backend_usage(since=before) == {"csr_transposed_add": {ran: 4}}
    if backend == "cpu-native":
        transposed = dense.T.contiguous().to_sparse_csr()
        crow_t, col_t = (
            t.to(index_dtype) for t in (transposed.crow_indices(), transposed.col_indices())
        )
        by_csr = csr_matmul(crow_t, col_t, transposed.values(), grad, backend="cpu-native")
        assert torch.equal(out, by_csr)


def test_the_transposed_add_writes_into_out_and_refuses_a_wrong_shape():
    crow, col, values, x, dense = csr_case()
    grad = torch.randn(12, 5)
    out = torch.ones(9, 5)
    assert csr_transposed_add_(crow, col, values, grad, out, "cpu-native") is out
    torch.testing.assert_close(out, 1 + dense.T @ grad, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"needs x \[12, width\] and out \[columns, width\]"):
        csr_transposed_add_(crow, col, values, grad, torch.zeros(9, 4), "cpu-native")
