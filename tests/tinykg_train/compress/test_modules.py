import torch
import torch.nn.functional as F
from torch import nn

from tinykg_train.compress import CompressionConfig
from tinykg_train.compress import modules as cm

INT2 = CompressionConfig(bits=2)


def test_linear_keeps_nn_linear_parameters_and_computes_the_same():
    torch.manual_seed(0)
    ours = cm.Linear(12, 5, config=INT2)
    torch.manual_seed(0)
    plain = nn.Linear(12, 5)
    assert ours.state_dict().keys() == plain.state_dict().keys()
    assert all(
        torch.equal(a, b) for a, b in zip(ours.parameters(), plain.parameters(), strict=True)
    )
    x = torch.randn(300, 12)
    assert torch.equal(ours(x), plain(x))
    assert cm.Linear(12, 5, bias=False, config=INT2).bias is None


def test_activation_and_normalization_modules_match_functional():
    x = torch.randn(40, 64)
    assert torch.equal(cm.ReLU(config=INT2)(x), F.relu(x))
    assert torch.equal(cm.LeakyReLU(0.2, config=INT2)(x), F.leaky_relu(x, 0.2))
    assert torch.equal(cm.L2Normalize(config=INT2)(x), F.normalize(x, dim=-1))


def test_dropout_follows_train_and_eval():
    layer, x = cm.Dropout(0.5, config=INT2), torch.randn(40, 64)
    torch.manual_seed(3)
    dropped = layer(x)
    torch.manual_seed(3)
    assert torch.equal(dropped, F.dropout(x, 0.5, True))
    layer.eval()
    assert torch.equal(layer(x), x)


def test_every_wrapper_holds_its_config_as_compression_and_set_compression_reaches_it():
    layers = nn.Sequential(
        cm.Linear(8, 8, config=INT2),
        cm.LeakyReLU(0.2, config=INT2),
        cm.Dropout(0.1, config=INT2),
        cm.L2Normalize(config=INT2),
        nn.Sequential(cm.ReLU(config=INT2)),
    )
    wrappers = [m for m in layers.modules() if isinstance(m, cm.CompressedModule)]
    assert len(wrappers) == 5 and all(m.compression is INT2 for m in wrappers)
    int8 = CompressionConfig(bits=8)
    cm.set_compression(layers, int8)
    assert all(m.compression is int8 for m in wrappers)
