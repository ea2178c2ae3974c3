"""One training of the accuracy matrix, run one epoch at a time on request (a worker process).

The driver (`benchmarks.bench_matrix`) keeps one worker per width of a (dataset, mode, model, seed)
group alive and lets their epochs take turns, so the epoch times it compares come from the same
minutes of a shared machine, and each width's peak memory is its own process's. A worker speaks JSON
lines: it prints `{"ready": ..., "next_epoch": N, "done": bool}` once its session is open (resumed
from the run dir's checkpoint when there is one), then answers

- `{"cmd": "epoch"}` with `{"epoch_seconds": s, "done": bool}` after one epoch of the trainer's own
  `run_epoch` (train, evaluate when due, checkpoint);
- `{"cmd": "finish"}` with `{"recall@20": r}` after the trainer's `finish` (test split of the best
  valid epoch; writes metrics.json), then exits.

    python -m benchmarks._matrix_worker CONFIG.json THREADS
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def send(message: dict[str, Any]) -> None:
    print(json.dumps(message), flush=True)


def is_done(session) -> bool:
    state = session.state
    return state.stopped_early or state.next_epoch >= session.config.epochs


def serve(config_path: Path, threads: int) -> int:
    import torch

    from tinykg_train.config import TrainConfig
    from tinykg_train.device import describe_device, resolve_device
    from tinykg_train.run_dir import write_yaml_atomic
    from tinykg_train.session import open_session
    from tinykg_train.trainer import finish, run_epoch

    torch.set_num_threads(threads)
    config = TrainConfig.from_dict(json.loads(config_path.read_text()))
    config = config.with_overrides(resume=(Path(config.out) / "checkpoint.pt").is_file())
    device = resolve_device(config.device)
    session = open_session(config, device)
    session.run.create()
    write_yaml_atomic(session.run.config, config.to_dict())
    send({"ready": True, "next_epoch": session.state.next_epoch, "done": is_done(session)})
    for line in sys.stdin:
        command = json.loads(line)["cmd"]
        if command == "epoch":
            row = run_epoch(session, session.state.next_epoch)
            send({"epoch_seconds": row["epoch_seconds"], "done": is_done(session)})
        elif command == "finish":
            result = finish(session, describe_device(device))
            send({"recall@20": result["recall@20"]})
            return 0
        else:
            raise ValueError(f"unknown command {command!r}")
    return 0


if __name__ == "__main__":
    sys.exit(serve(Path(sys.argv[1]), int(sys.argv[2])))
