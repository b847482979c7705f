"""The vLLM model loader of the `pt2serve` load format (imported by `register` only: vllm here).

`load_weights` hands the checkpoint's `(name, tensor)` pairs to the model's own `load_weights` as
they land, by the names the checkpoint gives them (HF names in a `pytorch_model.bin`, `state_dict`
names in a `.pt2` exported from an HF model, its program's constants left out: what vLLM's models
map), then fails with the names of the parameters nothing filled. Under tensor parallelism the
ranks read the checkpoint once between them (ranks.py) unless the settings say each reads all.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator

import torch
from vllm.config import ModelConfig
from vllm.config.load import LoadConfig
from vllm.distributed.parallel_state import get_tp_group
from vllm.model_executor.layers.quantization.kv_cache import BaseKVCacheMethod
from vllm.model_executor.model_loader.base_loader import BaseModelLoader

from ...blocking.sync import OpenOptions
from ...sources import redact_location
from .ranks import RankGroup, iter_shared_weights
from .settings import RANKS_EACH_READS_ALL, LoaderSettings
from .weights import WeightsNotLoaded, iter_weights, missing_parameters

logger = logging.getLogger("vllm.pt2serve")  # under "vllm": vLLM's handler prints it


class Pt2ServeModelLoader(BaseModelLoader):
    """Weights read by pt2serve from any location it reads (`model_loader_extra_config["location"]`),
    else from the model folder's `.pt2`, `*.index.json` or `*.bin` files."""

    def __init__(self, load_config: LoadConfig) -> None:
        super().__init__(load_config)
        self.settings = LoaderSettings.from_extra_config(load_config.model_loader_extra_config)

    def download_model(self, model_config: ModelConfig) -> None:
        """Nothing to fetch ahead: vLLM already has the model's config, and the weights are read
        while they load."""

    def load_weights(self, model: torch.nn.Module, model_config: ModelConfig) -> None:
        locations = self.settings.locations(model_config.model)
        shown = [redact_location(location) for location in locations]
        started = time.perf_counter()
        options = self.settings.open_options()
        with contextlib.closing(self._weights(locations, options)) as weights:
            loaded = model.load_weights(weights)  # a failure here cancels the reads still running
        logger.info("pt2serve: loaded %s in %.2f s", ", ".join(shown), time.perf_counter() - started)
        if loaded is None:  # a model that does not report what it loaded: vLLM checks nothing either
            return
        missing = missing_parameters(model, loaded, exempt=_cannot_come_from_checkpoint)
        if missing:
            raise WeightsNotLoaded(missing, shown)

    def _weights(self, locations: list[str], options: OpenOptions) -> Iterator[tuple[str, torch.Tensor]]:
        """The checkpoint's tensors: read once by all tensor-parallel ranks together (ranks.py),
        unless there is one rank or the settings say each reads all."""
        tensor_parallel = get_tp_group()
        if tensor_parallel.world_size == 1 or self.settings.ranks == RANKS_EACH_READS_ALL:
            return iter_weights(locations, options=options, verify=self.settings.verify)
        group = RankGroup(tensor_parallel.cpu_group, tensor_parallel.ranks, tensor_parallel.rank_in_group)
        return iter_shared_weights(locations, group, options=options, verify=self.settings.verify)


def _cannot_come_from_checkpoint(module: torch.nn.Module) -> bool:
    """A module whose parameters a checkpoint may lack: it quantizes while loading, or holds
    KV-cache scales that fall back to defaults (as vLLM's own check exempts them)."""
    method = getattr(module, "quant_method", None)
    return bool(getattr(method, "uses_meta_device", False)) or isinstance(method, BaseKVCacheMethod)
