"""vLLM's `LLM(...)` to its first token with the weights in S3 (SeaweedFS): the `pt2serve` load
format against vLLM's `runai_streamer` on the same weights as safetensors in the same bucket (issue 49).

    python3 bench/vllm_load.py [--n-embd 1024] [--n-layer 12] [--repeat 5] [--cache-dir DIR] [--spawn]
                               [--strict]

The model is GPT-2-shaped with random weights (testing/vllm_child.py make-model; by default
n_embd 1024, 12 layers, GPT-2's vocabulary: about 0.8 GB of float32), made once into the cache
folder. vLLM is the CPU build in the tests' venv (testing/vllm.py), runai-model-streamer[s3] is
added there on first use. Every contender is a fresh vLLM process (testing/vllm_child.py generate)
timed inside it from `LLM(...)` to the end of a one-token request; the contenders alternate round by
round (bench/_rounds.py) and the rows compare medians. By default the engine and its worker run in
that one process (VLLM_ENABLE_V1_MULTIPROCESSING=0, the "uni" executor), which also times the
model's load alone (vLLM's `get_model`): with vLLM's own processes (`--spawn`) the engine's start
took 25 - 56 s on the loaded two-core machine, swamping loads of a few seconds.

contenders:
- pt2serve: a local folder holding config.json, `--load-format pt2serve`, `location` the `.pt2` in S3
- runai_streamer: `LLM(model="s3://…/st/")` over config.json and model.safetensors in the same bucket
  (vLLM pulls the config, the streamer the weights)
- safetensors-local: vLLM's own loader on model.safetensors from local disk (reported; each row
  prints what the others take over it: the cost of the weights being in S3)
- dummy: `--load-format dummy`, nothing read (reported; its random initialization of the weights
  takes longer than a local load, so it is no floor of the load)
Where runai_streamer cannot run here, the baseline becomes `aws s3 cp` of the safetensors folder
(the AWS CLI in a tool venv) then vLLM's own safetensors load, and the output says so.

target: pt2serve <= 1.0x the baseline's seconds (printed as baseline / pt2serve >= 1.0x).

    python3 bench/vllm_load.py --tensor-parallel 2 [--n-embd 1024] [--n-layer 12] [--repeat 3]

Tensor parallelism (issue 54): vLLM's own processes with N ranks, one core each, the `.pt2` and the
`pytorch_model.bin` served by nginx (on loopback, its access log counting the bytes it sent), with
`--load-format pt2serve` as it is (`ranks: read-once`: the ranks read the checkpoint once between
them) against `ranks: each-reads-all` (every rank reads all of it, as before). Rows: LLM(...) to the
first token, and nginx's bytes over the file's. targets: read-once's bytes <= 1.1x the file; its
first token no later than each-reads-all's.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

ROOT = pathlib.Path(__file__).resolve().parent.parent
for folder in (ROOT, ROOT / "bench"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from _host import cpu_times, steal_note  # noqa: E402
from _rounds import alternate, compare  # noqa: E402

from testing.provision import ensure_venv_tool  # noqa: E402
from testing.seaweed import SeaweedS3  # noqa: E402
from testing.servers import NginxProcess  # noqa: E402
from testing.vllm import ChildFailed, child_env, ensure_vllm, generate, make_model, s3_env  # noqa: E402

TARGET = 1.0
DEFAULT_CACHE = pathlib.Path("/tmp/pt2serve-bench/vllm")
RUNAI = "runai-model-streamer[s3]>=0.15.7"
BIG_OBJECT = 1 << 30  # SeaweedFS takes larger objects as multipart uploads only
SAFETENSORS_FILES = ("config.json", "generation_config.json", "model.safetensors")


def ensure_model(python: pathlib.Path, cache: pathlib.Path, n_embd: int, n_layer: int) -> pathlib.Path:
    """The model folder for this shape, made once (a marker written last)."""
    out = cache / f"gpt2-{n_embd}x{n_layer}"
    if not (out / ".made").exists():
        shutil.rmtree(out, ignore_errors=True)
        print(f"making {out} (random weights, torch.export) ...", flush=True)
        make_model(python, out, n_embd=n_embd, n_layer=n_layer, n_head=n_embd // 64, vocab=50257)
        (out / ".made").write_text("")
    return out


def ensure_runai(python: pathlib.Path) -> None:
    probe = subprocess.run([str(python), "-c", "import runai_model_streamer_s3"], capture_output=True)
    if probe.returncode:
        print(f"pip install {RUNAI} into the vLLM venv ...", flush=True)
        pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", RUNAI]
        subprocess.run(pip, check=True, stdout=subprocess.DEVNULL, env=child_env())


class Rig:
    """SeaweedFS with the .pt2 and the safetensors folder; the contenders as timed callables."""

    def __init__(self, s3: SeaweedS3, python: pathlib.Path, model: pathlib.Path, work: pathlib.Path) -> None:
        self.s3, self.python, self.model, self.work = s3, python, model, work
        for key, path in [("bench/model.pt2", model / "model.pt2")] + [
            (f"bench/st/{name}", model / name) for name in SAFETENSORS_FILES
        ]:
            big = path.stat().st_size > BIG_OBJECT
            s3.upload(s3.private_bucket, key, path, part_size=64 << 20 if big else None)
        self.env = {
            **s3_env(s3.endpoint, s3.access_key, s3.secret_key, s3.region),
            "RUNAI_STREAMER_S3_ENDPOINT": s3.endpoint,
            "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING": "0",
        }
        self.config_only = work / "config_only"
        self.local = work / "safetensors"
        for folder, names in ((self.config_only, ["config.json"]), (self.local, SAFETENSORS_FILES)):
            folder.mkdir()
            for name in names:
                (folder / name).symlink_to(model / name)
        self.runs = 0
        self.in_process = True
        self.tokens: dict[str, set[tuple[int, ...]]] = {}  # each load format's greedy tokens
        self.loads: dict[str, list[float]] = {}  # each contender's get_model seconds (in process)

    def _generate(
        self, label: str, model: pathlib.Path | str, load_format: str, extra: dict | None = None
    ) -> dict:
        self.runs += 1
        out = self.work / f"run-{self.runs}.json"
        result = generate(self.python, model, out, load_format=load_format, extra=extra, env=self.env,
                          in_process=self.in_process)  # fmt: skip
        self.tokens.setdefault(load_format, set()).add(tuple(result["tokens"]))
        if result["load_model_seconds"] is not None:
            self.loads.setdefault(label, []).append(result["load_model_seconds"])
        return result

    def same_tokens(self) -> bool:
        """Whether every load format that read the weights gave the same greedy tokens (a time of a
        load that read something else would compare nothing)."""
        found = {
            tokens for load_format, seen in self.tokens.items() if load_format != "dummy" for tokens in seen
        }
        return len(found) == 1

    def pt2serve(self) -> float:
        location = f"s3://{self.s3.private_bucket}/bench/model.pt2"
        return self._generate("pt2serve", self.config_only, "pt2serve", {"location": location})[
            "first_token_seconds"
        ]

    def runai(self) -> float:
        model = f"s3://{self.s3.private_bucket}/bench/st/"
        return self._generate("runai_streamer", model, "runai_streamer")["first_token_seconds"]

    def safetensors_local(self) -> float:
        return self._generate("safetensors-local", self.local, "safetensors")["first_token_seconds"]

    def dummy(self) -> float:
        return self._generate("dummy", self.config_only, "dummy")["first_token_seconds"]

    def awscli_then_safetensors(self) -> float:
        aws = ensure_venv_tool("awscli", "aws")
        target = self.work / f"download-{self.runs}"
        started = time.perf_counter()
        subprocess.run(
            [aws, "s3", "cp", "--recursive", "--only-show-errors", f"s3://{self.s3.private_bucket}/bench/st/",
             str(target)],
            check=True, env=child_env(self.env),
        )  # fmt: skip
        downloaded = time.perf_counter() - started
        result = self._generate("awscli+safetensors", target, "safetensors")
        if "awscli+safetensors" in self.loads:
            self.loads["awscli+safetensors"][-1] += downloaded
        shutil.rmtree(target)
        return downloaded + result["first_token_seconds"]


def table(title: str, seconds: dict[str, list[float]], baseline: str) -> float:
    """One figure's medians, its rounds, each contender over safetensors-local's median (what reading
    from S3 adds to a load from local disk); the ratio to the baseline."""
    print(f"\n{title}", flush=True)
    medians = {label: statistics.median(values) for label, values in seconds.items()}
    for label, value in medians.items():
        over = value - medians["safetensors-local"]
        each = " ".join(f"{v:.2f}" for v in seconds[label])
        print(f"  {label:20s} {value:7.2f} s   over local {over:+6.2f} s   (rounds {each})", flush=True)
    ratio = medians[baseline] / medians["pt2serve"]
    print(f"  pt2serve vs {baseline}: {medians['pt2serve'] / medians[baseline]:.2f}x the time "
          f"({ratio:.2f}x as fast)", flush=True)  # fmt: skip
    print(f"    {compare(seconds, 'pt2serve', baseline, TARGET)}", flush=True)
    return ratio


READ_ONCE_TARGET = 1.1  # nginx's bytes over the file's, the ranks together


def tensor_parallel(python: pathlib.Path, model: pathlib.Path, ranks: int, repeat: int) -> bool:
    """read-once against each-reads-all at `ranks` ranks, for the .pt2 and the .bin from nginx."""
    passed = True
    with NginxProcess(model) as nginx, tempfile.TemporaryDirectory(prefix="vllm-bench-tp-") as work:
        config_only = pathlib.Path(work) / "config_only"
        config_only.mkdir()
        (config_only / "config.json").symlink_to(model / "config.json")
        for weights in ("model.pt2", "pytorch_model.bin"):
            size = (model / weights).stat().st_size
            sent: dict[str, list[float]] = {}
            tokens: set[tuple[int, ...]] = set()

            def run(mode: str, weights: str = weights, size: int = size, sent=sent, tokens=tokens) -> float:
                nginx.take_log()
                extra = {"location": nginx.url(weights), "ranks": mode}
                out = pathlib.Path(work) / "run.json"
                result = generate(python, config_only, out, load_format="pt2serve", extra=extra,
                                  tensor_parallel=ranks)  # fmt: skip
                sent.setdefault(mode, []).append(sum(r["bytes"] for r in nginx.take_log()) / size)
                tokens.add(tuple(result["tokens"]))
                return result["first_token_seconds"]

            seconds = alternate({"read-once": lambda: run("read-once"),
                                 "each-reads-all": lambda: run("each-reads-all")}, repeat)  # fmt: skip
            print(f"\n{weights} ({size / 1e6:.0f} MB) from nginx, {ranks} ranks, {repeat} rounds, medians:")
            for mode in seconds:
                each = " ".join(f"{v:.1f}" for v in seconds[mode])
                print(f"  {mode:15s} first token {statistics.median(seconds[mode]):6.1f} s (rounds {each})   "
                      f"nginx sent {statistics.median(sent[mode]):.2f}x the file", flush=True)  # fmt: skip
            print(f"    {compare(seconds, 'read-once', 'each-reads-all', 1.0)}", flush=True)
            ok = statistics.median(sent["read-once"]) <= READ_ONCE_TARGET and len(tokens) == 1
            print(f"  {'PASS' if ok else 'FAIL'} (target: read-once <= {READ_ONCE_TARGET}x the file; "
                  f"same tokens every run: {len(tokens) == 1})", flush=True)  # fmt: skip
            passed = passed and ok
    return passed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-embd", type=int, default=1024)
    parser.add_argument("--n-layer", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=5, help="rounds (default 5; each run starts vLLM)")
    parser.add_argument("--cache-dir", type=pathlib.Path, default=DEFAULT_CACHE)
    spawn = "vLLM's own engine and worker processes (then no figure of the load alone)"
    parser.add_argument("--spawn", action="store_true", help=spawn)
    parser.add_argument("--strict", action="store_true", help="exit 1 on FAIL")
    parser.add_argument("--tensor-parallel", type=int, default=1, help="ranks: read-once vs each-reads-all")
    args = parser.parse_args(argv)

    python = ensure_vllm()
    model = ensure_model(python, args.cache_dir, args.n_embd, args.n_layer)
    if args.tensor_parallel > 1:
        passed = tensor_parallel(python, model, args.tensor_parallel, args.repeat)
        return 1 if args.strict and not passed else 0
    nbytes = (model / "model.safetensors").stat().st_size
    print(f"model {model.name}: model.safetensors {nbytes / 1e6:.0f} MB, "
          f"model.pt2 {(model / 'model.pt2').stat().st_size / 1e6:.0f} MB", flush=True)  # fmt: skip

    with SeaweedS3() as s3, tempfile.TemporaryDirectory(prefix="vllm-bench-") as work:
        s3.create_buckets()
        rig = Rig(s3, python, model, pathlib.Path(work))
        rig.in_process = not args.spawn
        baseline, note = "runai_streamer", "vLLM's runai_streamer on the safetensors in the same bucket"
        try:
            ensure_runai(python)
            probe = rig.runai()
            print(f"runai_streamer runs here (probe: {probe:.1f} s)", flush=True)
        except (ChildFailed, subprocess.CalledProcessError) as failed:
            print(f"runai_streamer cannot run here: {str(failed)[-1500:]}", flush=True)
            baseline = "awscli+safetensors"
            note = "`aws s3 cp` of the safetensors folder, then vLLM's own safetensors load"
        rig.loads.clear()
        contenders: dict[str, Callable[[], float]] = {
            "pt2serve": rig.pt2serve,
            baseline: rig.runai if baseline == "runai_streamer" else rig.awscli_then_safetensors,
            "safetensors-local": rig.safetensors_local,
            "dummy": rig.dummy,
        }
        rig.dummy()  # warm-up: the first vLLM start on a machine pays for cold files
        rig.loads.clear()
        since = cpu_times()
        seconds = alternate(contenders, args.repeat)
        same = rig.same_tokens()

    where = "vLLM's own processes" if args.spawn else "the engine and its worker in one process"
    print(f"\nweights from S3 (SeaweedFS on loopback), {where}, {args.repeat} rounds alternating, medians;"
          f" baseline: {note}", flush=True)  # fmt: skip
    ratio = table("LLM(...) to the first token:", seconds, baseline)
    verdict = "PASS" if ratio >= TARGET and same else "FAIL"
    print(f"  {verdict} (target: pt2serve <= {TARGET}x the baseline's time)", flush=True)
    load_ratio = None
    if rig.loads:
        load_ratio = table("the model's load alone (vLLM's get_model: build, weights, post-processing):",
                           rig.loads, baseline)  # fmt: skip
    print(f"\nevery load gave the same greedy tokens: {same}", flush=True)
    print(f"{steal_note(since)}", flush=True)
    passed = ratio >= TARGET and same
    print(json.dumps({"first_token": seconds, "load_model": rig.loads, "baseline": baseline, "ratio": ratio,
                      "load_ratio": load_ratio, "pass": passed}))  # fmt: skip
    return 1 if args.strict and not passed else 0


if __name__ == "__main__":
    sys.exit(main())
