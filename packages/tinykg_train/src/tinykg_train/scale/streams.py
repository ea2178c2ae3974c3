"""Ordering between the training thread's stream and the prefetch thread's side stream.

On CUDA the prefetch thread copies rows on its own stream, so copies overlap compute; the two
streams touch the same cache tensors, so each side waits for the other's last recorded work before
it writes slots the other may still use. On the CPU every operation is synchronous: the same calls
run and do nothing, so the CPU path executes the very code the GPU path does.
"""

from __future__ import annotations

import contextlib

import torch


class Streams:
    """The side stream and the last events of each side, for one device."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        self._side = torch.cuda.Stream(device) if self.cuda else None
        self._main_done: torch.cuda.Event | None = None
        self._side_done: torch.cuda.Event | None = None

    def side(self) -> contextlib.AbstractContextManager:
        """Context in which the prefetch thread issues its copies (a no-op on the CPU)."""
        return torch.cuda.stream(self._side) if self.cuda else contextlib.nullcontext()

    def main_done(self) -> None:
        """The training thread's cache work so far is what the side stream must wait for."""
        if self.cuda:
            self._main_done = torch.cuda.Event()
            self._main_done.record(torch.cuda.current_stream(self.device))

    def side_done(self) -> None:
        """The prefetch thread's copies so far are what the training stream must wait for."""
        if self.cuda:
            self._side_done = torch.cuda.Event()
            self._side_done.record(self._side)

    def main_waits(self) -> None:
        """Make the training thread's stream wait for the side stream's recorded copies."""
        if self.cuda and self._side_done is not None:
            torch.cuda.current_stream(self.device).wait_event(self._side_done)

    def side_waits(self) -> None:
        """Make the side stream wait for the training thread's recorded cache work."""
        if self.cuda and self._main_done is not None:
            self._side.wait_event(self._main_done)

    def staging(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A host buffer for one copy: pinned on CUDA, so the copy is asynchronous."""
        return torch.empty(shape, dtype=dtype, pin_memory=self.cuda)
