"""`csr_matmul`: the dense product's values on every backend, the native loops under `auto` for
float32 CPU tensors of any size, torch's CSR product for what they lack, what ran recorded."""

from __future__ import annotations

import pytest
import torch

from tinykg_kernels import backend_usage, csr_matmul, dispatch


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
