"""`EagerOptimizer`: a CPU training process never loads torch's compiler (dynamo, inductor,
Triton: 143 MiB resident) through its optimizer, and the optimizer's methods do what torch's do."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import torch

from tinykg_train import eager_optimizer
from tinykg_train.compact_adam import CompactAdam

COMPILER_MODULES = ("torch._dynamo", "torch._inductor", "triton")


def loaded_after(code: str, *args: str) -> list[str]:
    """Which of `COMPILER_MODULES` a fresh interpreter has loaded after running `code`."""
    probe = textwrap.dedent(code) + textwrap.dedent(f"""
        import sys
        print("loaded:" + ",".join(m for m in {COMPILER_MODULES!r} if m in sys.modules))
    """)
    done = subprocess.run(
        [sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("loaded:"), done.stdout[-2000:]
    return [m for m in last.removeprefix("loaded:").split(",") if m]


def test_the_optimizers_methods_leave_the_compiler_unloaded():
    loaded = loaded_after("""
        import torch
        from tinykg_train.compact_adam import CompactAdam
        weight = torch.nn.Parameter(torch.randn(8, 4))
        for state in ("float32", "bfloat16", "rowwise"):
            optimizer = CompactAdam([{"params": [weight], "state": state}], lr=0.1)
            optimizer.add_param_group({"params": [torch.nn.Parameter(torch.ones(3))]})
            for _ in range(2):
                optimizer.zero_grad(set_to_none=True)
                weight.grad = torch.randn(8, 4)
                optimizer.step()
            optimizer.load_state_dict(optimizer.state_dict())
    """)
    assert loaded == []
    # the control: torch's own Adam loads it on its first step (why EagerOptimizer exists)
    assert "torch._dynamo" in loaded_after("""
        import torch
        weight = torch.nn.Parameter(torch.randn(8, 4))
        weight.grad = torch.ones(8, 4)
        torch.optim.Adam([weight]).step()
    """)


def test_a_cpu_training_run_leaves_the_compiler_unloaded(tiny_dataset_dir, tmp_path):
    loaded = loaded_after(
        """
        import sys
        from pipelines.train import main
        assert main(sys.argv[1:]) == 0
        """,
        "--data", str(tiny_dataset_dir), "--out", str(tmp_path / "run"), "--model", "kgat",
        "--bits", "2", "--epochs", "1", "--device", "cpu", "--no-mlflow", "--threads", "1",
    )  # fmt: skip
    assert loaded == []


def test_once_the_compiler_is_loaded_torchs_wrapped_methods_run(monkeypatch):
    import torch._dynamo  # noqa: F401 - loaded, as a compiled model would have it

    assert eager_optimizer._torch_method("zero_grad") is torch.optim.Optimizer.zero_grad
    monkeypatch.delitem(sys.modules, "torch._dynamo")
    assert eager_optimizer._torch_method("zero_grad") is torch.optim.Optimizer.zero_grad.__wrapped__


def test_its_state_dict_round_trips_as_torchs_does():
    weight = torch.nn.Parameter(torch.randn(6, 4))
    optimizer = CompactAdam([weight], lr=0.05)
    weight.grad = torch.randn(6, 4)
    optimizer.step()
    saved = optimizer.state_dict()
    assert saved["param_groups"][0]["params"] == [0] and set(saved["state"][0]) == {
        "step", "exp_avg", "exp_avg_sq",
    }  # fmt: skip
    again = CompactAdam([torch.nn.Parameter(weight.detach().clone())], lr=0.05)
    again.load_state_dict(saved)
    assert torch.equal(again.state_dict()["state"][0]["exp_avg"], saved["state"][0]["exp_avg"])
    optimizer.zero_grad(set_to_none=True)
    assert weight.grad is None
