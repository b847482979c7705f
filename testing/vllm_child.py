"""Run inside the vLLM venv (testing/vllm.py starts it with `python -P`, so this folder's
testing/vllm.py cannot shadow the vllm package): make a tiny GPT-2-style model, or run vLLM on one.

  make-model OUT [--arch gpt2|llama|qwen2] --n-embd 64 --n-layer 2 --n-head 2 [--kv-heads 1] [--drop NAME ...]
      OUT/config.json, OUT/model.safetensors (transformers' save_pretrained), OUT/pytorch_model.bin
      (torch.save of the state dict: HF names; GPT-2's lm_head.weight tied) and OUT/model.pt2
      (torch.export.save: the state_dict names; Llama's and Qwen2's rotary frequencies are
      non-persistent buffers, in the program's constants); random weights, normal with std 0.3, so
      greedy tokens differ from one step to the next. --drop leaves names out of the .bin and the .pt2.
      Llama and Qwen2 have grouped KV heads (--kv-heads of --n-head) of size --n-embd / --n-head.
  generate MODEL_DIR OUT.json --load-format F [--extra JSON] --prompt 1,2,3 --max-tokens N --logprobs K
           [--tensor-parallel-size N]
      vLLM's LLM(...) without a tokenizer, greedy (N tensor-parallel ranks): OUT.json holds the
      tokens, each step's top logprobs, and the seconds from LLM(...) to the first token (a
      one-token request first).
      --in-process (with VLLM_ENABLE_V1_MULTIPROCESSING=0): the engine and its worker in this
      process, and the seconds of the model's load alone (vLLM's get_model) as well.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import time


def _transformers_model(args: argparse.Namespace):
    """The untrained transformers model `args` describe."""
    import transformers

    if args.arch == "gpt2":
        config = transformers.GPT2Config(
            vocab_size=args.vocab,
            n_positions=args.positions,
            n_embd=args.n_embd,
            n_layer=args.n_layer,
            n_head=args.n_head,
            tie_word_embeddings=True,
            bos_token_id=0,
            eos_token_id=0,
        )
        kind = transformers.GPT2LMHeadModel
    else:
        config_kind, kind = {
            "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
            "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        }[args.arch]
        config = config_kind(
            vocab_size=args.vocab,
            hidden_size=args.n_embd,
            intermediate_size=2 * args.n_embd,
            num_hidden_layers=args.n_layer,
            num_attention_heads=args.n_head,
            num_key_value_heads=args.kv_heads,
            head_dim=args.n_embd // args.n_head,
            max_position_embeddings=args.positions,
            tie_word_embeddings=False,
            bos_token_id=0,
            eos_token_id=0,
        )
    config.use_cache = False  # torch.export of GPT-2 fails with the cache on
    return kind(config).eval()


def make_model(args: argparse.Namespace) -> None:
    import torch

    torch.manual_seed(args.seed)
    model = _transformers_model(args)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.3)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)  # config.json and model.safetensors
    state = {name: value for name, value in model.state_dict().items() if name not in args.drop}
    torch.save(state, out / "pytorch_model.bin")
    example = torch.zeros((1, 8), dtype=torch.long)
    exported = torch.export.export(model, (example,), strict=args.arch == "gpt2")
    if args.drop:
        # the exported program's own state dict must keep its names; a copy without them is what a
        # broken archive looks like to a reader (weights missing from the payload configs)
        torch.export.save(exported, out / "full.pt2")
        _drop_from_pt2(out / "full.pt2", out / "model.pt2", args.drop)
        (out / "full.pt2").unlink()
    else:
        torch.export.save(exported, out / "model.pt2")
    print(
        json.dumps(
            {
                "names": sorted(model.state_dict()),
                "parameters": sorted(dict(model.named_parameters())),
                "constants": sorted(exported.constants),
            }
        )
    )


def _drop_from_pt2(source: pathlib.Path, target: pathlib.Path, drop: list[str]) -> None:
    """A copy of a .pt2 whose weights config no longer lists `drop`."""
    import zipfile

    with zipfile.ZipFile(source) as zin, zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as zout:
        for item in zin.infolist():
            data = zin.read(item)
            if "/data/weights/" in item.filename and item.filename.endswith("_weights_config.json"):
                config = json.loads(data)
                for name in drop:
                    config["config"].pop(name, None)
                data = json.dumps(config).encode()
            zout.writestr(item, data)


def generate(args: argparse.Namespace) -> None:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    prompt = TokensPrompt(prompt_token_ids=[int(token) for token in args.prompt.split(",")])
    load_seconds = _time_model_loads() if args.in_process else []
    started = time.perf_counter()
    llm = LLM(
        distributed_executor_backend="uni" if args.in_process else None,
        model=args.model,
        load_format=args.load_format,
        model_loader_extra_config=json.loads(args.extra),
        skip_tokenizer_init=True,
        enforce_eager=True,
        max_model_len=args.max_model_len,
        dtype="float32",
        seed=0,
        tensor_parallel_size=args.tensor_parallel_size,
    )
    llm.generate([prompt], SamplingParams(max_tokens=1, temperature=0.0, detokenize=False), use_tqdm=False)
    first_token = time.perf_counter() - started
    params = SamplingParams(
        max_tokens=args.max_tokens, temperature=0.0, logprobs=args.logprobs, detokenize=False
    )
    output = llm.generate([prompt], params, use_tqdm=False)[0].outputs[0]
    steps = [
        {str(token): logprob.logprob for token, logprob in step.items()} for step in output.logprobs or []
    ]
    pathlib.Path(args.out).write_text(
        json.dumps(
            {
                "tokens": list(output.token_ids),
                "logprobs": steps,
                "first_token_seconds": first_token,
                "load_model_seconds": load_seconds[0] if load_seconds else None,
            }
        )
    )


def _time_model_loads() -> list[float]:
    """The seconds of each `get_model` (the model built, its weights loaded and post-processed) the
    CPU model runner calls in this process: with the engine and its worker in this process
    (VLLM_ENABLE_V1_MULTIPROCESSING=0 and the "uni" executor), the load alone, whatever the format."""
    import os

    from vllm.v1.worker import cpu_model_runner

    assert os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0", "--in-process needs it in the environment"
    seconds: list[float] = []
    get_model = cpu_model_runner.get_model

    def timed(*args, **kwargs):
        started = time.perf_counter()
        try:
            return get_model(*args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - started)

    cpu_model_runner.get_model = timed
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("make-model")
    make.add_argument("out")
    make.add_argument("--arch", choices=["gpt2", "llama", "qwen2"], default="gpt2")
    make.add_argument("--kv-heads", type=int, default=1)
    make.add_argument("--n-embd", type=int, default=64)
    make.add_argument("--n-layer", type=int, default=2)
    make.add_argument("--n-head", type=int, default=2)
    make.add_argument("--vocab", type=int, default=512)
    make.add_argument("--positions", type=int, default=128)
    make.add_argument("--seed", type=int, default=0)
    make.add_argument("--drop", action="append", default=[])
    run = commands.add_parser("generate")
    run.add_argument("model")
    run.add_argument("out")
    run.add_argument("--load-format", required=True)
    run.add_argument("--extra", default="{}")
    run.add_argument("--prompt", default="1,2,3,4")
    run.add_argument("--max-tokens", type=int, default=8)
    run.add_argument("--logprobs", type=int, default=5)
    run.add_argument("--max-model-len", type=int, default=64)
    run.add_argument("--tensor-parallel-size", type=int, default=1)
    run.add_argument("--in-process", action="store_true", help="engine and worker here; times get_model")
    args = parser.parse_args()
    (make_model if args.command == "make-model" else generate)(args)


if __name__ == "__main__":
    main()
