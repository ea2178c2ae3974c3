import torch

from tinykg_train.compress import CompressionConfig
from tinykg_train.compress.codec import compress
from tinykg_train.compress.masks import PackedMask
from tinykg_train.compress.saving import load, save


class Probe(torch.autograd.Function):
    """Saves a mix of plain, missing and compressed values; backward checks what comes back."""

    @staticmethod
    def forward(ctx, x, config):
        save(ctx, x, None, compress(x, config), PackedMask.pack(x > 0))
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        raw = load(ctx, decode=False)
        plain, missing, restored, positive = load(ctx)
        Probe.seen = (raw, plain, missing, restored, positive)
        return grad, None


def test_save_and_load_keep_order_kind_and_values():
    x = torch.randn(40, 64, requires_grad=True)
    Probe.apply(x, CompressionConfig(bits=8)).sum().backward()
    raw, plain, missing, restored, positive = Probe.seen
    assert [type(item).__name__ for item in raw] == [
        "Tensor",
        "NoneType",
        "Compressed",
        "PackedMask",
    ]
    assert torch.equal(plain, x.detach()) and missing is None
    torch.testing.assert_close(restored, x.detach(), atol=0.05, rtol=0)
    assert torch.equal(positive, x.detach() > 0)
