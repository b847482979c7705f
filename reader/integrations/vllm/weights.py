"""The checkpoint's tensors for vLLM's synchronous `model.load_weights`, handed over as they land,
and the check that they covered every parameter the model has. torch only, no vllm.

The reads run on a BackgroundLoop (an event loop in a thread of its own), ahead of the consumer:
while vLLM copies one tensor into its parameter, the next ones are being received, within
`iter_load`'s memory budget (PT2SERVE_MAX_BUFFERED, else 256 MiB): a tensor is handed over one at a
time, and the next one is asked of `iter_load` only once vLLM comes back for it, so what vLLM
dropped is free and the reads stop when it stops asking (bounded by bytes, not a queue of tensors).
Leaving the loop early (a failed `load_weights`) cancels what is still being read.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from ...blocking.loop import BackgroundLoop
from ...blocking.sync import OpenOptions
from ...errors import ReaderError
from ...loading.budget import budget_bytes
from ...loading.selection import checkpoint
from ...torch import iter_load
from .handover import Handover

if TYPE_CHECKING:
    import torch

_DONE = object()


class WeightsNotLoaded(ReaderError, ValueError):
    """The archive left parameters of the vLLM model unset; `missing` lists their names."""

    def __init__(self, missing: Sequence[str], locations: Sequence[str]) -> None:
        self.missing = list(missing)
        super().__init__(
            f"{len(self.missing)} parameter{'' if len(self.missing) == 1 else 's'} of the model "
            f"{'is' if len(self.missing) == 1 else 'are'} not in {', '.join(locations)}: "
            + ", ".join(self.missing)
        )


def iter_weights(
    locations: Sequence[str],
    *,
    options: OpenOptions | None = None,
    verify: bool | None = None,
    max_buffered: int | None = None,
) -> Iterator[tuple[str, torch.Tensor]]:
    """Every readable tensor of the checkpoint of each archive at `locations` (opened with
    `options`, None: `open_archive`'s defaults; an exported program's state dict, not its
    constants), by the name the checkpoint gives it, in the order they land; a read's failure is
    raised here. At most `max_buffered` bytes are read ahead (None: PT2SERVE_MAX_BUFFERED, else
    the default)."""
    budget = budget_bytes(max_buffered, "max_buffered")
    opener = options or OpenOptions()
    loop = BackgroundLoop("pt2serve-vllm-weights")
    arrived = Handover(loop)

    async def read_all() -> None:
        for location in locations:
            async with opener.open(location) as archive:
                names = [info.name for info in checkpoint(archive) if info.readable]
                tensors = iter_load(archive, names=names, verify=verify, max_buffered=budget)
                async with contextlib.aclosing(tensors):
                    async for item in tensors:
                        await arrived.put(item)  # vLLM is done with it: the next one frees its storage

    try:
        reading = loop.submit(read_all())
        reading.add_done_callback(lambda _: arrived.end(_DONE))  # after every tensor it put
        while (item := arrived.get()) is not _DONE:
            yield item
            del item
            arrived.done()
        reading.result()  # the reads' failure, if any
    finally:
        loop.close()  # cancels what is still being read, and ends the thread


def missing_parameters(
    model: torch.nn.Module, loaded: Iterable[str], *, exempt: Callable[[torch.nn.Module], bool]
) -> list[str]:
    """The model's parameters `load_weights` did not report loaded, sorted: vLLM's own check
    (`weights_not_loaded`), with every module counted but those `exempt` says a checkpoint cannot
    fill (online quantization, KV-cache scales), and empty parameters left out."""
    skipped = {
        _full(module_name, name)
        for module_name, module in model.named_modules()
        if exempt(module)
        for name, _ in module.named_parameters()
    }
    expected = {name for name, parameter in model.named_parameters() if parameter.numel() > 0}
    return sorted(expected - set(loaded) - skipped)


def _full(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name
