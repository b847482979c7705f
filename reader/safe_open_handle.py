"""`reader.safe_open`: safetensors' `safe_open` surface over every archive the reader opens.

Loaders are written against safetensors' handle (TGI's `Weights`: `get_slice(name)[a:b]`,
`get_shape()`; transformers' tensor-parallel loader; vLLM's and SGLang's weight iterators: `keys()`,
`get_tensor`), so this handle answers what safetensors' `safe_open` answers for a safetensors file of
the same weights (the one the service's bundle writes: reader.formats.safetensors), for any location
and container: a `.pt2`, a `torch.save` checkpoint (`pytorch_model.bin`), a sharded `*.index.json`.

- The archive is opened once, in `__init__`, on an event loop in a thread the handle owns
  (reader.blocking.loop); `get_tensor` reads the tensor's row-major bytes and a slice reads
  only the byte runs it covers (reader.bodies.tensor_slice), never opening again. Calls from
  several threads run concurrently. `close()` / leaving the `with` closes the archive and stops the loop.
- `get_tensor(k)` also reads the keys after `k` in `keys()` order in the background
  (reader.loading.readahead), at most `max_buffered` bytes of them at once (None:
  PT2SERVE_MAX_BUFFERED, else 256 MiB; a tensor bigger than that is read alone), so a loop over
  `keys()` (vLLM's and SGLang's weight iterators) is not one read after the other. A key asked for
  out of turn drops what was read ahead and reads ahead from there.
- Names: the checkpoint of one model (`model=`, else the default one; reader.loading.selection's
  `checkpoint`): an exported program's state dict, not its constants (non-persistent buffers, lifted
  tensors), so `keys()` are the model's `state_dict()` keys; asking for a constant raises
  TensorNotFound saying where it can be read. Tensors safetensors has no dtype for (complex32,
  complex128, float8_e8m0fnu) or that the reader cannot serve (pickled subclasses, symbolic sizes)
  are left out of `keys()`, as the bundle leaves them out, and named in
  `metadata()["pt2serve.skipped"]`; asking for one raises UnsupportedPayload naming it and why.
- Every tensor is a fresh, writable copy: tied names and views come out as separate tensors with
  equal values, as from a safetensors file.
- A slice is NumPy basic indexing (ints, slices with steps, `...`, None) and equals `full[index]`.
  Negative steps work too (safetensors refuses them). An int out of range or too many indices raise
  IndexError; slice bounds past the end are clipped, as in Python and safetensors.
"""

from __future__ import annotations

import contextlib
import os
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from .archives.sharded import ShardedArchive
from .blocking.loop import BackgroundLoop, LoopClosed
from .blocking.sync import OpenOptions
from .bodies.tensor_slice import SliceBytes
from .errors import TensorNotFound, UnsupportedPayload
from .formats import safetensors as safetensors_format
from .loading.budget import Budget, budget_bytes
from .loading.readahead import ReadAhead
from .loading.selection import PROGRAM_CONSTANT, checkpoint
from .pt2.dtypes import dtype_of
from .pt2.tensorinfo import TensorInfo
from .sources import DEFAULT_CHUNK_SIZE, ByteSource, HttpOptions, S3Settings, redact_location
from .versions import source_version

if TYPE_CHECKING:
    from .archives.archive import Archive
    from .archives.opener import open_archive
    from .cache import CacheStore

# A tensor at least this big is read straight into its buffer (its local header read first).
STRAIGHT_IN = 1 << 20
# framework names as safetensors spells them -> which one
FRAMEWORKS = {"pt": "pt", "torch": "pt", "pytorch": "pt", "np": "np", "numpy": "np"}


class safe_open:  # noqa: N801 - safetensors' name, used the same way
    """`with reader.safe_open("s3://bucket/model.pt2", framework="pt") as f:` then `f.keys()`,
    `f.get_tensor(name)`, `f.get_slice(name)[0:128, ::2]`, `f.get_slice(name).get_dtype()`.

    `framework`: "pt" (also "torch", "pytorch": torch tensors, moved to `device`) or "np"/"numpy"
    (NumPy arrays; bfloat16 and float8 through ml_dtypes). `model` picks one model of a multi-model
    archive. The other keywords are `reader.open_archive`'s.
    """

    def __init__(
        self,
        location: str | os.PathLike[str] | ByteSource,
        framework: str = "pt",
        device: str | int = "cpu",
        *,
        model: str | None = None,
        tail_size: int | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        http_options: HttpOptions | None = None,
        s3_settings: S3Settings | None = None,
        cache_dir: str | os.PathLike[str] | CacheStore | None = None,
        offline: bool | None = None,
        stale_if_error: bool | None = None,
        max_buffered: int | None = None,
    ) -> None:
        budget = Budget(budget_bytes(max_buffered))
        self._framework = _framework(framework)
        self._device = _device(self._framework, device)
        where = os.fspath(location) if isinstance(location, (str, os.PathLike)) else location.location
        self._where = redact_location(where)
        options = OpenOptions(
            tail_size, chunk_size, http_options, s3_settings, cache_dir, offline, stale_if_error
        )
        opening = options.open(location)
        self._loop = BackgroundLoop(f"safe_open {self._where}")
        try:
            self._archive: Archive | ShardedArchive = self._loop.run(_opened(opening))
        except BaseException:
            self._loop.close()
            raise
        self._reading_ahead: list[ReadAhead] = []  # the finalizer's to stop (it must not hold the handle)
        self._closer = weakref.finalize(self, _close, self._loop, self._archive, self._reading_ahead)
        try:
            self._model = self._archive.resolve_model(model)
            tensors = checkpoint(self._archive, self._model)
        except BaseException:
            self._closer()
            raise
        writable = safetensors_format.writable
        self._tensors = {info.name: info for info in tensors if writable(info)}
        self._skipped = {info.name: info for info in tensors if not writable(info)}
        archive, infos = self._archive, self._tensors
        self._ahead = ReadAhead(
            lambda name: _read_whole(archive, infos[name]),
            {name: info.geometry.nbytes for name, info in infos.items()},
            sorted(infos),  # keys()
            budget,
        )
        self._reading_ahead.append(self._ahead)

    # -- the context manager ------------------------------------------------------------------------

    def __enter__(self) -> safe_open:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the archive and stop the handle's loop; later calls raise ValueError."""
        self._closer()

    def __repr__(self) -> str:
        state = "open" if self._closer.alive else "closed"
        return f"<reader.safe_open {self._where} ({state}, {len(self._tensors)} tensors)>"

    # -- safetensors' surface -----------------------------------------------------------------------

    def keys(self) -> list[str]:
        """The tensors' names, sorted (as safetensors lists them)."""
        self._check_open()
        return sorted(self._tensors)

    def offset_keys(self) -> list[str]:
        """The tensors' names in the order their bytes lie in the archive (for a sharded
        checkpoint: shard by shard, in file-name order)."""
        self._check_open()
        return sorted(self._tensors, key=self._position)

    def metadata(self) -> dict[str, str]:
        """What a safetensors bundle of these weights carries in `__metadata__`: `format` ("pt"),
        and `pt2serve.archive_version` (the version the service names these bytes by),
        `pt2serve.container` ("pt2", "checkpoint", ...), `pt2serve.model`, and `pt2serve.skipped`
        (comma-separated names left out of `keys()`) when there are any."""
        self._check_open()
        found = {
            "format": "pt",
            "pt2serve.archive_version": source_version(self._archive.source),
            "pt2serve.container": self._archive.container,
            "pt2serve.model": self._model,
        }
        if self._skipped:
            found["pt2serve.skipped"] = ",".join(self._skipped)
        return found

    @property
    def stats(self) -> dict[str, dict[str, int]]:
        """pt2serve's own: requests made and bytes read so far, by purpose ("open", "data"), as
        `Archive.stats` counts them (every shard's together for a sharded checkpoint)."""
        self._check_open()
        return self._archive.stats

    def get_tensor(self, name: str) -> Any:
        """The whole tensor, a fresh row-major copy (one read of its bytes, perhaps made ahead)."""
        info = self._info(name)
        buffer = self._loop_run(self._ahead.get(name))
        return self._convert(buffer, info, info.geometry.sizes)

    def get_tensors(self) -> dict[str, Any]:
        """Every tensor of `keys()` by name, read in `offset_keys()` order, one read each (as
        safetensors' `get_tensors`; `reader.torch.load` reads a whole model as one plan instead)."""
        return {name: self.get_tensor(name) for name in self.offset_keys()}

    def get_slice(self, name: str) -> SafeSlice:
        """The tensor, not read yet: `get_shape()`, `get_dtype()`, and `[index]` reads the slice."""
        return SafeSlice(self, self._info(name))

    # -- inside -------------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if not self._closer.alive:
            raise ValueError(f"safe_open({self._where}) is closed")

    def _loop_run(self, coroutine: Any) -> Any:
        try:
            return self._loop.run(coroutine)
        except LoopClosed as exc:
            raise ValueError(f"safe_open({self._where}) is {exc}") from None

    def _info(self, name: str) -> TensorInfo:
        self._check_open()
        info = self._tensors.get(name)
        if info is not None:
            return info
        skipped = self._skipped.get(name)
        if skipped is not None:
            reason = skipped.unsupported or f"dtype {skipped.dtype} has no safetensors dtype"
            raise UnsupportedPayload(f"{name!r} in {self._where} cannot be read as safetensors: {reason}")
        found = self._archive.layout(
            name, model=self._model
        )  # not in the archive: TensorNotFound, close matches
        if found.kind == PROGRAM_CONSTANT:
            raise TensorNotFound(
                f"{name!r} in {self._where} is a constant of the exported program (a non-persistent buffer "
                "or a lifted tensor), not in its state dict: read it with reader.torch.read or Archive.read"
            )
        raise TensorNotFound(f"no tensor {name!r} in {self._where}")  # (every name it has is listed)

    def _position(self, name: str) -> tuple[str, int, int, str]:
        info = self._tensors[name]
        entry = self._archive.tensor(name, model=self._model, order="contiguous").entry
        shard = self._archive.index.weight_map[name] if isinstance(self._archive, ShardedArchive) else ""
        return shard, entry.header_offset, info.storage.offset if info.storage else 0, name

    def _convert(self, buffer: np.ndarray, info: TensorInfo, shape: tuple[int, ...]) -> Any:
        """A uint8 buffer that this call owns, as the framework's tensor of `info`'s dtype."""
        if self._framework == "np":
            return buffer.view(dtype_of(info.geometry.dtype).numpy).reshape(shape)
        import torch

        dtype = dtype_of(info.geometry.dtype).torch
        if not buffer.nbytes:  # torch cannot view an empty byte tensor as a wider dtype
            tensor = torch.empty(shape, dtype=dtype)
        else:
            tensor = torch.from_numpy(buffer).view(dtype).reshape(shape)
        return tensor if self._device is None else tensor.to(self._device)


class SafeSlice:
    """One tensor of a `safe_open` handle, read only when indexed: `[index]` reads `full[index]`
    (only the byte runs it covers, reader.pt2.slicing) as a fresh tensor."""

    def __init__(self, handle: safe_open, info: TensorInfo) -> None:
        self._handle = handle
        self._info = info

    def get_shape(self) -> list[int]:
        return list(self._info.geometry.sizes)

    def get_dtype(self) -> str:
        """safetensors' dtype string: "F32", "BF16", "F8_E4M3", "I64", "BOOL", ..."""
        return safetensors_format.DTYPES[self._info.geometry.dtype]

    def __getitem__(self, index: object) -> Any:
        handle, info = self._handle, self._info
        handle._check_open()
        tensor = handle._archive.tensor(info.name, model=handle._model, order="contiguous")
        sliced = SliceBytes(tensor, index)  # planned here: IndexError, TypeError before any read
        buffer = handle._loop_run(_read_slice(sliced))
        return handle._convert(buffer, info, sliced.plan.shape)

    def __repr__(self) -> str:
        return f"<SafeSlice {self._info.name!r} {self.get_dtype()} {self.get_shape()}>"


async def _opened(opening: open_archive) -> Archive | ShardedArchive:
    return await opening


async def _read_whole(archive: Archive | ShardedArchive, info: TensorInfo) -> np.ndarray:
    """The tensor's row-major bytes in a buffer of their own. A big one's data offset is found first
    (its local header: one small request), so that its bytes go straight into the buffer: read
    with the header, they came as bytes and a copy, twice the tensor for a moment."""
    buffer = np.empty(info.geometry.nbytes, dtype=np.uint8)
    tensor = archive.tensor(info.name, model=info.model, order="contiguous")
    if tensor.length >= STRAIGHT_IN:
        with contextlib.suppress(ValueError):  # not a stored run of bytes: gathered, as before
            await tensor.archive_span()
    await tensor.read_into(buffer)
    return buffer


async def _read_slice(sliced: SliceBytes) -> np.ndarray:
    data = await sliced.read()
    return np.frombuffer(bytearray(data), dtype=np.uint8)


def _close(loop: BackgroundLoop, archive: Archive | ShardedArchive, reading_ahead: list[ReadAhead]) -> None:
    """Stop reading ahead, close the archive on its loop, then stop the loop (a finalizer: holds no
    handle)."""
    try:
        if loop.usable:
            for ahead in reading_ahead:
                loop.run(ahead.stop())
            loop.run(archive.close())
    finally:
        loop.close()


def _framework(framework: str) -> str:
    found = FRAMEWORKS.get(framework)
    if found is None:
        raise ValueError(f"framework {framework!r} is not supported: use one of {', '.join(FRAMEWORKS)}")
    return found


def _device(framework: str, device: str | int) -> Any:
    """The torch device tensors move to (None: stay on the CPU); NumPy arrays live on the CPU only."""
    if framework == "np":
        if device != "cpu":
            raise ValueError(f"device {device!r}: NumPy arrays live on the CPU (device='cpu')")
        return None
    import torch

    try:
        found = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device {device!r} is not a torch device: {exc}") from None
    return None if found.type == "cpu" else found
