"""The native loops (`tinykg_kernels.native`): built once per machine and cached, used exactly where
they apply, off with TINYKG_KERNELS_NATIVE=0, absent without a compiler and warning once after a
failed build (the inductor loops then run, and backend cpu-native refuses); the CSR product against
the dense one. The codec's values are checked against the reference in `test_cpu_ops`, the plane passes' against torch in
`test_leaky_pair` and `test_dropout` (every case with and without the native loops)."""

from __future__ import annotations

import warnings

import pytest
import torch

from tinykg_kernels import backend_usage, cpu_ops, dispatch, native, quantize
from tinykg_kernels.native import library
from tinykg_kernels.packing import GroupLayout

needs_native = pytest.mark.skipif(not native.available(), reason="no C++ compiler here")


@needs_native
def test_the_library_is_built_once_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(native.CACHE_ENV, str(tmp_path))
    first = library._build(library._compiler())
    assert first.parent == tmp_path and first.name.startswith("native-")
    stamp = first.stat().st_mtime_ns
    assert library._build(library._compiler()) == first  # cached: not rebuilt
    assert first.stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no partial file left behind


def test_applies_to_float32_values_with_bfloat16_parameters_on_the_cpu_only():
    if not native.available():
        assert not native.codec_applies(torch.float32, torch.bfloat16, torch.device("cpu"))
        return
    cpu = torch.device("cpu")
    assert native.codec_applies(torch.float32, torch.bfloat16, cpu)
    assert not native.codec_applies(torch.float16, torch.float16, cpu)
    assert not native.codec_applies(torch.float32, torch.float32, cpu)
    assert not native.codec_applies(torch.float32, torch.bfloat16, torch.device("meta"))


@needs_native
def test_cpu_native_calls_it_where_it_applies_and_cpu_inductor_never(monkeypatch):
    calls = []
    real = native.quantize_groups

    def counting(*args):
        calls.append(args[0].shape)
        return real(*args)

    monkeypatch.setattr(native, "quantize_groups", counting)
    monkeypatch.delenv(dispatch.BACKEND_ENV, raising=False)
    x = torch.randn(128, 64)
    before = backend_usage()
    quantize(x, bits=2, seed=3, backend="cpu-native")
    quantize(x, bits=2, seed=3)  # auto
    assert calls == [(128, 64)] * 2
    quantize(x, bits=2, seed=3, backend="cpu-native", scale_dtype=torch.float32)  # steps down
    quantize(x, bits=2, seed=3, backend="cpu-inductor")
    monkeypatch.setenv(native.NATIVE_ENV, "0")
    quantize(x, bits=2, seed=3)  # auto without the native loops: inductor's
    assert len(calls) == 2
    assert backend_usage(since=before) == {"quantize": {"cpu-inductor": 3, "cpu-native": 2}}


def test_without_a_compiler_it_reports_why_and_the_inductor_loops_run(monkeypatch):
    monkeypatch.setattr(library, "_failure", native.failure())  # restored after the test
    monkeypatch.setattr(library, "_compiler", lambda: None)
    library.load.cache_clear()
    monkeypatch.setenv(native.NATIVE_ENV, "1")
    try:
        assert not native.available()
        assert "no C++ compiler" in native.failure()
        assert native.status() == "unavailable: no C++ compiler found (set CXX, or install g++)"
        layout = GroupLayout.for_shape((64, 64), None, 2)
        x = torch.randn(64, 64)
        codes, scale, zero = cpu_ops.quantize(x.reshape(-1), layout, "uniform", torch.bfloat16, 5)
        assert codes.shape == (64, 16) and scale.dtype == torch.bfloat16
        assert dispatch.select_backend(torch.device("cpu"), "auto", 10**6) == "cpu-inductor"
        with pytest.raises(RuntimeError, match="'cpu-native' cannot run here: .* no C\\+\\+ compiler"):
            quantize(x, backend="cpu-native")
    finally:
        library.load.cache_clear()  # loaded again on next use


def test_turned_off_by_the_environment(monkeypatch):
    monkeypatch.setenv(native.NATIVE_ENV, "0")
    assert not native.enabled() and not native.available()
    assert native.status() == "off (TINYKG_KERNELS_NATIVE=0)"
    with pytest.raises(RuntimeError, match=r"library is off \(TINYKG_KERNELS_NATIVE=0\); use"):
        quantize(torch.randn(64, 64), backend="cpu-native")
    monkeypatch.setenv(native.NATIVE_ENV, "1")
    assert native.enabled()


@needs_native
@pytest.mark.parametrize("width", [16, 32, 48, 64, 8, 70])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_csr_matmul_equals_the_dense_product(width, index_dtype):
    generator = torch.Generator().manual_seed(width)
    dense = torch.rand(40, 30, generator=generator)
    dense[dense < 0.8] = 0  # ~20% entries, some rows empty
    dense[5] = 0
    csr = dense.to_sparse_csr()
    x = torch.randn(30, width, generator=generator)
    crow, col = csr.crow_indices().to(index_dtype), csr.col_indices().to(index_dtype)
    assert native.csr_applies(crow, col, csr.values(), x)
    out = native.csr_matmul(crow, col, csr.values(), x)
    torch.testing.assert_close(out, dense @ x, rtol=1e-5, atol=1e-6)
    assert torch.equal(out[5], torch.zeros(width))
    again = native.csr_matmul(crow, col, csr.values(), x)
    assert torch.equal(out, again)  # sequential sums: deterministic


def test_csr_matmul_says_when_values_and_columns_disagree():
    if not native.available():
        pytest.skip("no C++ compiler here")
    crow, col = torch.tensor([0, 1, 2], dtype=torch.int32), torch.tensor([0, 1], dtype=torch.int32)
    with pytest.raises(ValueError, match="one value per column index"):
        native.csr_matmul(crow, col, torch.ones(3), torch.ones(2, 4))


def test_csr_matmul_applies_to_float32_cpu_tensors_only():
    i32 = torch.zeros(3, dtype=torch.int32)
    assert not native.csr_applies(i32, i32, torch.ones(2), torch.ones(2, 4, dtype=torch.float64))
    assert not native.csr_applies(i32, i32.long(), torch.ones(2), torch.ones(2, 4))


@needs_native
@pytest.mark.parametrize("threads", [1, 3])
def test_csr_matmul_in_slices_of_rows_equals_one_pass(threads):
    generator = torch.Generator().manual_seed(7)
    n = native.PARALLEL_MIN_ROWS + 37
    rows = torch.randint(0, n, (6 * n,), generator=generator)
    cols = torch.randint(0, 500, (6 * n,), generator=generator)
    dense = torch.sparse_coo_tensor(torch.stack([rows, cols]), torch.rand(6 * n), (n, 500))
    csr = dense.coalesce().to_sparse_csr()
    crow, col = csr.crow_indices().int(), csr.col_indices().int()
    x = torch.randn(500, 32, generator=generator)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        whole = native.csr_matmul(crow, col, csr.values(), x)
        torch.set_num_threads(threads)
        sliced = native.csr_matmul(crow, col, csr.values(), x)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(sliced, whole)  # each row summed in the same order either way
    torch.testing.assert_close(whole, dense.to_dense() @ x, rtol=1e-5, atol=1e-5)


@needs_native
def test_the_plane_mask_passes_run_natively_for_large_float32_tensors(monkeypatch):
    from tinykg_kernels import apply_dropout_noise, leaky_relu_pair

    calls = []
    for name in ("leaky_pair", "dropout_apply"):
        real = getattr(native, name)
        monkeypatch.setattr(
            native,
            name,
            lambda *args, _real=real, _name=name, **kwargs: (
                calls.append(_name) or _real(*args, **kwargs)
            ),
        )
    big = torch.randn(128, 64)
    leaky_relu_pair(big, big, 0.2)
    apply_dropout_noise(big, torch.ones_like(big))
    leaky_relu_pair(big.double(), big.double(), 0.2)  # float64: the torch ops
    leaky_relu_pair(torch.randn(4, 4), torch.randn(4, 4), 0.2)  # small: the torch ops
    assert calls == ["leaky_pair", "dropout_apply"]


def test_a_failed_build_warns_once_with_the_compiler_s_first_line(monkeypatch):
    import subprocess

    def failing_build(compiler):
        raise subprocess.CalledProcessError(1, [compiler], stderr="codec.cpp:1: error: boom\nmore")

    monkeypatch.setattr(library, "_failure", native.failure())  # restored after the test
    monkeypatch.setattr(library, "_compiler", lambda: "/usr/bin/g++")
    monkeypatch.setattr(library, "_build", failing_build)
    monkeypatch.setenv(native.NATIVE_ENV, "1")
    library.load.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="native CPU loops are off .* error: boom"):
            assert not native.available()
        assert (
            native.failure()
            == "/usr/bin/g++ failed on tinykg_kernels/native: codec.cpp:1: error: boom"
        )
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert not native.available()  # once per process
    finally:
        library.load.cache_clear()
