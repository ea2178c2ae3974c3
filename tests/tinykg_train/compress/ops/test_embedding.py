import pytest
import torch
import torch.nn.functional as F

from tinykg_train.compress import ActivationMeter, CompressionConfig
from tinykg_train.compress.ops import embedding

ALL_BITS = (32, 8, 4, 2, 1)


def make_table(dtype: torch.dtype = torch.float32):
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(50, 16, generator=gen, dtype=dtype).requires_grad_()
    index = torch.randint(0, 50, (7, 9), generator=gen)  # repeated rows accumulate
    return weight, index


@pytest.mark.parametrize("bits", ALL_BITS)
def test_forward_and_gradient_equal_f_embedding_at_every_bit_width(bits, grad_tools):
    weight, index = make_table()
    config = CompressionConfig(bits=bits)
    assert torch.equal(embedding(weight, index, config=config), F.embedding(index, weight))
    probe = torch.randn(7, 9, 16)
    (ours,) = grad_tools.gradients(lambda w: embedding(w, index, config=config), (weight,), probe)
    (plain,) = grad_tools.gradients(lambda w: F.embedding(index, w), (weight,), probe)
    torch.testing.assert_close(ours, plain)  # indices are exact: no rounding anywhere
    assert ours.layout == torch.strided


def test_function_backward_matches_finite_differences(exact_functions):
    weight, index = make_table(torch.float64)
    assert torch.autograd.gradcheck(
        lambda w: embedding(w, index[:2, :3] % 10, config=exact_functions), (weight[:10, :3],)
    )


@pytest.mark.parametrize(("rows", "index_bytes"), [(50, 1), (300, 2), (70_000, 4)])
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_saves_only_the_indices_in_the_narrowest_dtype(rows, index_bytes, index_dtype):
    model = torch.nn.Module()
    model.weight = torch.nn.Parameter(torch.randn(rows, 4))
    index = torch.randint(0, rows, (7, 9), generator=torch.Generator().manual_seed(0))
    with ActivationMeter(model) as meter:
        out = embedding(model.weight, index.to(index_dtype), config=CompressionConfig(bits=2))
    assert meter.total_bytes == index.numel() * index_bytes
    (grad,) = torch.autograd.grad(out.sum(), model.weight)
    assert torch.equal(
        grad, torch.bincount(index.reshape(-1), minlength=rows)[:, None].expand(-1, 4).float()
    )
