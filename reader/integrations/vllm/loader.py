"""The vLLM model loader of the `pt2serve` load format (imported by `register` only: vllm here).

`load_weights` hands the checkpoint's `(name, tensor)` pairs to the model's own `load_weights` as
they land, by the names the checkpoint gives them (HF names in a `pytorch_model.bin`, `state_dict`
names in a `.pt2` exported from an HF model, its program's constants left out: what vLLM's models
map), then fails with the names of the parameters nothing filled.
"""

from __future__ import annotations

import contextlib
import logging
import time

import torch
from vllm.config import ModelConfig
from vllm.config.load import LoadConfig
from vllm.model_executor.layers.quantization.kv_cache import BaseKVCacheMethod
from vllm.model_executor.model_loader.base_loader import BaseModelLoader

from ...sources import redact_location
from .settings import LoaderSettings
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
        with contextlib.closing(
            iter_weights(locations, options=options, verify=self.settings.verify)
        ) as weights:
            loaded = model.load_weights(weights)  # a failure here cancels the reads still running
        logger.info("pt2serve: loaded %s in %.2f s", ", ".join(shown), time.perf_counter() - started)
        if loaded is None:  # a model that does not report what it loaded: vLLM checks nothing either
            return
        missing = missing_parameters(model, loaded, exempt=_cannot_come_from_checkpoint)
        if missing:
            raise WeightsNotLoaded(missing, shown)


def _cannot_come_from_checkpoint(module: torch.nn.Module) -> bool:
    """A module whose parameters a checkpoint may lack: it quantizes while loading, or holds
    KV-cache scales that fall back to defaults (as vLLM's own check exempts them)."""
    method = getattr(module, "quant_method", None)
    return bool(getattr(method, "uses_meta_device", False)) or isinstance(method, BaseKVCacheMethod)
