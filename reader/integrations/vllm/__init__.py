"""vLLM's load format `pt2serve`: the `vllm.general_plugins` entry point (pyproject.toml) calls
`register` in every vLLM process (front end, engine core, workers), so the format is known where
the weights are loaded. vllm is imported only when vLLM calls `register`; docs/integrations.md."""

from __future__ import annotations

LOAD_FORMAT = "pt2serve"


def register() -> None:
    """Register the load format with vLLM (vLLM loads its general plugins once a process)."""
    from vllm.model_executor.model_loader import register_model_loader

    from .loader import Pt2ServeModelLoader

    register_model_loader(LOAD_FORMAT)(Pt2ServeModelLoader)
