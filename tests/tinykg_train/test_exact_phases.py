"""`exact_phases`: a phase's quantized saves kept exact at a fixed width.

`cf,kg` is the A/A control of the accuracy findings (docs/precision.md): the compressed code path
storing nothing quantized must step as FP32 does, up to float rounding (its runs then drift apart
as any two do: Adam turns rounding-sized gradient differences into whole steps); a phase left out
keeps its quantized saves and their noise.
"""

from __future__ import annotations

import pytest
import torch

from tinykg_train.config import TrainConfig
from tinykg_train.epoch import saving
from tinykg_train.errors import ConfigError
from tinykg_train.session import open_session
from tinykg_train.trainer import train


def kgat_config(data, out, **overrides) -> TrainConfig:
    settings = dict(
        data=str(data), out=str(out), model="kgat", epochs=1, seed=3, embed_dim=16, n_layers=2,
        batch_size=64, kg_batch_size=64, max_batches_per_epoch=2, dropout=0.2, lr=0.01,
        device="cpu", threads=1,
    )  # fmt: skip
    return TrainConfig(**{**settings, **overrides})


def trained_weights(config: TrainConfig) -> tuple[dict, dict[str, torch.Tensor]]:
    metrics = train(config)
    state = torch.load(f"{config.out}/checkpoint.pt", weights_only=True)["model"]
    return metrics, {k: v for k, v in state.items() if v.is_floating_point()}


def step_gradients(config: TrainConfig, phase: str) -> dict[str, torch.Tensor]:
    """The gradients of the first batch of `phase`, stored as the trainer's steps store them."""
    session = open_session(config, torch.device("cpu"))
    model = session.model
    model.train()
    model.on_epoch_start(0)
    batches, loss = (
        (session.cf_batches, model.loss) if phase == "cf" else (session.kg_batches, model.kg_loss)
    )
    batch = next(iter(batches.epoch(0)))
    torch.manual_seed(7)  # the same dropout masks, negatives and rounding noise for every width
    with saving(session, phase):
        loss(*batch).backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def largest_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(((a[k] - b[k]).norm() / a[k].norm().clamp_min(1e-12)).item() for k in a)


@pytest.fixture(scope="module")
def fp32_run(tiny_dataset_dir, tmp_path_factory):
    return trained_weights(kgat_config(tiny_dataset_dir, tmp_path_factory.mktemp("fp32") / "r"))


@pytest.mark.parametrize("phase", ["cf", "kg"])
def test_an_exact_phase_steps_as_fp32_and_int2_does_not(tiny_dataset_dir, tmp_path, phase):
    def gradients(**overrides):
        return step_gradients(kgat_config(tiny_dataset_dir, tmp_path / "r", **overrides), phase)

    fp32 = gradients()
    assert largest_difference(fp32, gradients(bits=2, exact_phases=phase)) < 1e-5  # rounding only
    assert largest_difference(fp32, gradients(bits=2)) > 1e-3  # the noise the control removes
    other = "kg" if phase == "cf" else "cf"
    assert largest_difference(fp32, gradients(bits=2, exact_phases=other)) > 1e-3


def test_one_exact_phase_keeps_the_other_quantized(tiny_dataset_dir, tmp_path, fp32_run):
    fp32_metrics, _ = fp32_run
    runs = {
        phases: trained_weights(
            kgat_config(
                tiny_dataset_dir, tmp_path / (phases or "none"), bits=2, exact_phases=phases
            )
        )
        for phases in ("", "kg", "cf")
    }
    held = {phases: metrics["activation_bytes"] for phases, (metrics, _) in runs.items()}
    # the CF step's held bytes: quantized unless cf is exact; exact, still less than FP32's (the
    # compressed ops' structure: 1-bit masks, factors instead of their products, recomputation)
    assert held["kg"] == held[""] < held["cf"] < fp32_metrics["activation_bytes"]
    assert runs["kg"][0]["config"]["exact_phases"] == ["kg"]


def test_exact_phases_are_checked_when_the_config_is_built():
    assert TrainConfig(bits=2, exact_phases="kg, cf,kg").exact_phases == ("kg", "cf")
    assert TrainConfig(bits=2, exact_phases=["cf"]).to_dict()["exact_phases"] == ["cf"]
    with pytest.raises(ConfigError, match=r"names training phases: cf, kg \(got eval\)"):
        TrainConfig(bits=2, exact_phases="eval")
    with pytest.raises(ConfigError, match="'exact_phases' needs a list of phases"):
        TrainConfig(bits=2, exact_phases=3)
    with pytest.raises(ConfigError, match="with bits 32 every save is exact already"):
        TrainConfig(bits=32, exact_phases="cf")
    with pytest.raises(ConfigError, match="applies to fixed widths"):
        TrainConfig(bits="auto", exact_phases="cf")
