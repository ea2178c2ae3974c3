import pytest
import torch

from tinykg_train.compress import ActivationMeter, CompressionConfig, compress_saved_tensors
from tinykg_train.compress.ops import gather

ALL_BITS = (32, 8, 4, 2, 1)


def make_scores(dtype: torch.dtype = torch.float32):
    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(40, 30, generator=gen, dtype=dtype).requires_grad_()
    index = torch.randint(0, 30, (40, 8), generator=gen)  # repeated columns accumulate
    return scores, index


@pytest.mark.parametrize("bits", ALL_BITS)
@pytest.mark.parametrize("dim", [1, -1, 0])
def test_forward_and_gradient_equal_torch_gather_at_every_bit_width(bits, dim, grad_tools):
    scores, index = make_scores()
    if dim == 0:
        index = index.T.remainder(40)[:, :30]  # rows of dim 0: values in [0, 40)
    config = CompressionConfig(bits=bits)
    assert torch.equal(gather(scores, dim, index, config=config), torch.gather(scores, dim, index))
    probe = torch.randn(index.shape)
    (ours,) = grad_tools.gradients(lambda s: gather(s, dim, index, config=config), (scores,), probe)
    (plain,) = grad_tools.gradients(lambda s: torch.gather(s, dim, index), (scores,), probe)
    assert torch.equal(ours, plain)  # the gradient never reads the values: exact at any width


def test_function_backward_matches_finite_differences(exact_functions):
    scores, index = make_scores(torch.float64)
    assert torch.autograd.gradcheck(
        lambda s: gather(s, 1, index[:5, :3] % 4, config=exact_functions), (scores[:5, :4],)
    )


def test_saves_the_index_only_where_torch_gather_saves_its_input_too():
    scores, index = make_scores()
    config = CompressionConfig(bits=2)
    values = scores.detach() * 2  # an activation, not a parameter
    with ActivationMeter() as meter:
        out = gather(values.requires_grad_(), 1, index, config=config)
    assert meter.total_bytes == index.numel()  # 30 columns: uint8 indices, no values
    with ActivationMeter() as meter, compress_saved_tensors(config):
        plain = torch.gather(values, 1, index)
    assert meter.total_bytes > index.numel() * 8  # torch's saves the (quantized) input as well
    assert out.grad_fn is not None and plain.grad_fn is not None  # both graphs held until here


def test_rejects_a_float_index():
    scores, index = make_scores()
    with pytest.raises(ValueError, match="integer dtype"):
        gather(scores, 1, index.float(), config=CompressionConfig(bits=2))
