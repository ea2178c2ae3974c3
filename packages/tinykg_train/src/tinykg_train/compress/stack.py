"""One stack of saved-tensor layers behind a single pair of autograd hooks.

PyTorch applies only the innermost `torch.autograd.graph.saved_tensors_hooks`, so a compressor and a
meter that each installed their own hooks would hide each other. Instead each context pushes a
*layer* onto a per-thread stack and installs the same `pack`/`unpack` pair, which consults the whole
stack whichever context is innermost:

1. the innermost *encoding* layer (a `compress_saved_tensors` context) turns the tensor into what is
   stored, unless the tensor is persistent (a parameter or module buffer), or it comes from an op of
   `tinykg_train.compress.ops` that already compressed what it saves (`precompressed()`);
2. every *observing* layer (an `ActivationMeter`) then sees the original and the stored value.

So compression always happens before observation, whichever way the contexts are nested. Layers also
register persistent storages (parameters and buffers of known models), shared by the whole stack.

While any layer is active the stack offers a *scope cache* (`cached`): a value derived from a tensor
(its compressed form, a narrowed copy of an index) is made once per tensor version and reused, however
many ops (or fresh views like `edge_index[0]`) save it: that is how a tensor saved twice is stored
once. Entries hold a weak reference to the source's storage and are valid only while it lives (a
freed storage's address may be reused by another); they never keep a source alive.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch

from tinykg_kernels import environment

StorageKey = tuple[torch.device, int]


class SavedTensorLayer:
    """Base of the stack's layers; override `encode` (compressors) or `observe` (meters)."""

    encodes = False

    def encode(self, tensor: torch.Tensor) -> Any:
        """What to store for `tensor` (a tensor, or an object with `decode()`)."""
        return tensor

    def observe(self, tensor: torch.Tensor, stored: Any) -> None:
        """Called for every tensor autograd saves, with what is stored for it."""


class _State(threading.local):
    def __init__(self) -> None:
        self.layers: list[SavedTensorLayer] = []
        self.persistent: list[set[StorageKey]] = []
        self.precompressed = 0
        self.cache: dict[tuple, tuple[weakref.ref, Any]] = {}  # key -> (storage ref, value)


_state = _State()


def storage_key(tensor: torch.Tensor) -> StorageKey | None:
    """(device, address) of the tensor's storage; None for tensors without one (sparse, meta)."""
    if tensor.layout != torch.strided or tensor.is_meta:
        return None
    return (tensor.device, tensor.untyped_storage().data_ptr())


def tensor_key(tensor: torch.Tensor) -> tuple | None:
    """Identity of a tensor's values: its storage (device, address), view geometry, dtype and
    in-place version. (Flat, and made without `storage_key`: asked several times per saved
    tensor.)"""
    if tensor.layout != torch.strided or tensor.is_meta:
        return None
    return (
        tensor.device,
        tensor.untyped_storage().data_ptr(),
        tensor.storage_offset(),
        tensor.shape,
        tensor.stride(),
        tensor.dtype,
        tensor._version,
    )


def flat_key(key: tuple, numel: int) -> tuple:
    """`tensor_key(tensor.view(-1))` of a contiguous tensor whose `tensor_key` is `key`, without
    making the view (the same storage, offset, dtype and version; one dim of stride 1)."""
    return (*key[:3], (numel,), (1,), *key[5:])


def persistent_storages(tensors: Iterable[torch.Tensor]) -> set[StorageKey]:
    keys = (storage_key(t) for t in tensors)
    return {key for key in keys if key is not None and key[1] != 0}


def model_storages(model: torch.nn.Module) -> set[StorageKey]:
    """Storages of a model's parameters and buffers: persistent, never compressed or counted.
    (Each module's own, in one walk of the modules: the scope of every step asks.)"""
    return persistent_storages(
        [
            tensor
            for module in model.modules()
            for tensors in (module._parameters.values(), module._buffers.values())
            for tensor in tensors
            if tensor is not None
        ]
    )


def is_persistent(tensor: torch.Tensor) -> bool:
    """A parameter, or a view of a registered parameter or buffer storage."""
    if isinstance(tensor, torch.nn.Parameter):
        return True
    if not _state.persistent:
        return False
    key = storage_key(tensor)
    return key is not None and any(key in keys for keys in _state.persistent)


def active() -> bool:
    """True while some layer (compressor or meter) is on this thread's stack."""
    return bool(_state.layers)


def cached(
    kind: Any,
    tensor: torch.Tensor,
    make: Callable[[torch.Tensor], Any],
    also: Sequence[Any] = (),
    *,
    key: tuple | None = None,
) -> Any:
    """`make(tensor)`, computed once per (kind, tensor version) while a layer is active. A value
    already held for this tensor version under one of the kinds in `also` (e.g. the same tensor
    stored at more bits) is returned instead, checked before `kind`. `key`: `tensor_key(tensor)`,
    when the caller has it already."""
    if not _state.layers:
        return make(tensor)
    if key is None:
        key = tensor_key(tensor)
        if key is None:
            return make(tensor)
    for candidate in also:
        value = _held(candidate, key)
        if value is not None:
            return value
    value = _held(kind, key)
    if value is None:
        value = make(tensor)
        _state.cache[(kind, key)] = (weakref.ref(tensor.untyped_storage()), value)
    return value


def hold(kind: Any, key: tuple, tensor: torch.Tensor, value: Any) -> None:
    """Hold `value` under (kind, `key`) while `tensor`'s storage lives, unless a value is held
    there already (`key`: of `tensor` or of a view of its storage, e.g. `flat_key`)."""
    if _state.layers and _held(kind, key) is None:
        _state.cache[(kind, key)] = (weakref.ref(tensor.untyped_storage()), value)


def lookup(kind: Any, tensor: torch.Tensor, *, key: tuple | None = None) -> Any:
    """What `cached` holds for (kind, this tensor version) while its source lives, else None
    (`key`: `tensor_key(tensor)`, or a view's as in `hold`, when the caller has it)."""
    if not _state.layers:
        return None
    if key is None:
        key = tensor_key(tensor)
    return None if key is None else _held(kind, key)


def _held(kind: Any, key: tuple) -> Any:
    """The cache's value for (kind, key) while its source storage lives, else None."""
    entry = _state.cache.get((kind, key))
    return None if entry is None or entry[0]() is None else entry[1]


class _Precompressed:
    def __enter__(self) -> None:
        _state.precompressed += 1

    def __exit__(self, *exc_info: object) -> None:
        _state.precompressed -= 1


_PRECOMPRESSED = _Precompressed()


def in_compressed_op() -> bool:
    """True inside an op of `tinykg_train.compress.ops` (its saves are compressed already)."""
    return bool(_state.precompressed)


def encoder_active() -> bool:
    """True while some layer on the stack encodes (a `compress_saved_tensors` or `uncompressed`)."""
    return any(layer.encodes for layer in _state.layers)


def precompressed() -> _Precompressed:
    """Mark tensors saved in this block as already compressed by an op: store them as they are.
    (A plain context object, not a generator: every compressed op enters one.)"""
    return _PRECOMPRESSED


def _pack(tensor: torch.Tensor) -> Any:
    stored: Any = tensor
    if not _state.precompressed and not is_persistent(tensor):
        encoder = next((layer for layer in reversed(_state.layers) if layer.encodes), None)
        if encoder is not None:
            stored = encoder.encode(tensor)
    if stored is tensor:
        # Never store the tensor object itself: an op's saved *output* would then hold its own
        # grad_fn, a C++/Python reference cycle that leaks the whole graph. A detached alias
        # shares the storage (and the version counter autograd checks) without the cycle.
        stored = tensor.detach()
    for layer in _state.layers:
        layer.observe(tensor, stored)
    return stored


def _unpack(stored: Any) -> torch.Tensor:
    return stored if isinstance(stored, torch.Tensor) else stored.decode()


@contextlib.contextmanager
def pushed(
    layer: SavedTensorLayer, persistent: set[StorageKey] | None = None, *, hooks: bool = True
) -> Iterator[None]:
    """Run the block with `layer` on the stack (and the shared hooks installed, unless `hooks` is
    False: then only the ops' own `compress` calls see the stack, its cache and persistent
    storages; nothing else autograd saves passes through Python). The kernels read their
    environment variables once for the block (`tinykg_kernels.environment.read_once`), not at
    every codec call."""
    state = _state
    state.layers.append(layer)
    state.persistent.append(persistent or set())
    try:
        with environment.read_once():
            if hooks:
                with torch.autograd.graph.saved_tensors_hooks(_pack, _unpack):
                    yield
            else:
                yield
    finally:
        state.layers.pop()
        state.persistent.pop()
        if not state.layers:
            state.cache.clear()


def add_persistent(tensors: Iterable[torch.Tensor]) -> None:
    """Register more persistent storages with the innermost layer (e.g. buffers of a module now running)."""
    if _state.persistent:
        _state.persistent[-1].update(persistent_storages(tensors))
