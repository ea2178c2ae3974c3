"""The shared losses: BPR against its textbook form, the L2 penalty, compressed saves."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tinykg_train.compress import CompressionConfig, compress_saved_tensors
from tinykg_train.models.losses import bpr_loss, dot_scores, l2_penalty


def test_bpr_loss_is_minus_log_sigmoid_of_the_margin():
    torch.manual_seed(0)
    u, i, j = (torch.randn(64, 8) * 3 for _ in range(3))  # large margins: softplus stays stable
    expected = -F.logsigmoid((u * i).sum(1) - (u * j).sum(1)).mean()
    torch.testing.assert_close(bpr_loss(u, i, j, config=CompressionConfig()), expected)


def test_l2_penalty_is_half_the_squared_norms_per_row():
    a, b = torch.ones(4, 3), 2 * torch.ones(4, 3)
    assert float(l2_penalty([a, b])) == (12 + 48) / (2 * 4)


def test_dot_scores_forward_is_exact_under_compression():
    torch.manual_seed(0)
    a = torch.randn(128, 32, requires_grad=True)
    b = torch.randn(128, 32, requires_grad=True)
    config = CompressionConfig(bits=2)
    with compress_saved_tensors(config):
        compressed = dot_scores(a, b, config=config)
    assert torch.equal(compressed, (a * b).sum(-1))
