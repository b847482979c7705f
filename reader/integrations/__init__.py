"""pt2serve inside the loaders users already run (vLLM's `--load-format pt2serve`): each
integration imports its host only when the host loads it, so reader never depends on one."""
