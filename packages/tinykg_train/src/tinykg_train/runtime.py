"""What ran a training run, for metrics.json and the MLflow run's tags: the tinykg_kernels backend
each codec, mask, plane and CSR call ran on, the kernels' version and native library, torch's threads.

Runs on different CPU paths give different numbers (the native and inductor loops draw counter-hash
rounding noise, the torch path `torch.rand`; the native CSR product sums in another order than
torch's), so a run records the path it took, not the one it asked for:

    before = kernel_calls()          # when the run starts
    ...                              # train
    run_record(since=before)         # {"kernels_backends": {"quantize": {"cpu-native": 812}, ...},
                                     #  "tinykg_kernels_version": "0.1.0", "kernels_native": "loaded",
                                     #  "kernels_backend_requested": "auto", "torch_threads": 1}

The counts cover this process's part of the run (a resumed run counts from its resume).
Imports torch and tinykg_kernels when called, so `record_tags` stays light for tracking.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

Usage = dict[str, dict[str, int]]
FIELDS = (
    "kernels_backends",
    "tinykg_kernels_version",
    "kernels_native",
    "kernels_backend_requested",
    "torch_threads",
)


def kernel_calls() -> Usage:
    """Calls per op and backend in this process so far: the `since` of a later `run_record`."""
    import tinykg_kernels

    return tinykg_kernels.backend_usage()


def run_record(since: Mapping[str, Mapping[str, int]] | None = None) -> dict[str, Any]:
    """The `FIELDS` of metrics.json for the kernel calls made after `since` (None: all of them)."""
    import torch

    import tinykg_kernels

    report = tinykg_kernels.runtime_report(since)
    return {
        "kernels_backends": report["backends"],
        "tinykg_kernels_version": report["version"],
        "kernels_native": report["native_library"],
        "kernels_backend_requested": report["backend_requested"],
        "torch_threads": torch.get_num_threads(),
    }


def record_tags(result: Mapping[str, Any]) -> dict[str, str]:
    """MLflow tags for the `FIELDS` that `result` (metrics.json) holds: each as a string, the
    backends as sorted JSON plus `kernels_backends_used` (e.g. `cpu-native,torch`) to search by."""
    tags = {key: str(result[key]) for key in FIELDS[1:] if key in result}
    if "kernels_backends" in result:
        usage = result["kernels_backends"]
        tags["kernels_backends"] = json.dumps(usage, sort_keys=True)
        used = sorted({backend for per_op in usage.values() for backend in per_op})
        tags["kernels_backends_used"] = ",".join(used) or "none"
    return tags
