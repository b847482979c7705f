"""The local cache: a second start of a server that loads from S3 reads its weights from disk.

    python3 bench/cache.py [--config gpt2|gpt2-2g] [--repeat N] [--cache-dir DIR]

The GPT-2-shaped archive (bench/make_gpt2.py) on SeaweedFS (loopback, SigV4). Rows, same run,
contenders alternating round by round (bench/_rounds.py), medians:
- cached reopen + `reader.load(..., cache_dir=)` + every byte touched vs a local `reader.load` of the
  same file + the same touch (target >= 0.9x), and the requests the cached reopen and load made to
  storage (target: 1, the revalidation);
- the first, filling load vs an uncached `reader.load` from S3 (informational: what filling costs);
- a replaced object is a new version at the next open (checked, not timed).
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import shutil
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
for folder in (ROOT, ROOT / "bench"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from _host import cpu_times, steal_note  # noqa: E402
from _rounds import alternate  # noqa: E402
from load_model import VOLUME_BYTES, S3Rig, row, same_page_cache, timed, touch, verdicts  # noqa: E402
from make_gpt2 import CONFIGS, DEFAULT_CACHE, ensure_gpt2  # noqa: E402

import reader  # noqa: E402
from reader.cache import CacheStore  # noqa: E402

TARGET = 0.9


def cached_load(rig: S3Rig, store: CacheStore) -> float:
    return timed(lambda: touch(reader.load(rig.location, s3_settings=rig.settings, cache_dir=store).values()))


def requests_of_a_cached_load(rig: S3Rig, store: CacheStore) -> dict:
    async def run() -> dict:
        async with reader.open_archive(rig.location, s3_settings=rig.settings, cache_dir=store) as ar:
            await ar.load()
            return ar.stats

    return asyncio.run(run())


def changed_is_a_new_version(rig: S3Rig, archive: pathlib.Path, store: CacheStore) -> bool:
    """Upload the archive with one byte of its first payload changed; the next open is another version."""
    data = bytearray(archive.read_bytes())
    data[len(data) // 3] ^= 0xFF  # inside the weights: the object's ETag (its MD5) changes
    before = {info.version for info in store.list()}
    rig.s3.upload(rig.s3.private_bucket, rig.archive_key, bytes(data))

    async def identity() -> str:
        async with reader.open_archive(rig.location, s3_settings=rig.settings, cache_dir=store) as ar:
            return ar.source.identity

    found = asyncio.run(identity())
    rig.s3.upload(rig.s3.private_bucket, rig.archive_key, archive)
    return found not in before


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="gpt2")
    parser.add_argument("--cache-dir", type=pathlib.Path, default=DEFAULT_CACHE, help="generated archives")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    archive, tensors = ensure_gpt2(args.config, args.cache_dir)
    nbytes = archive.stat().st_size
    from testing.seaweed import SeaweedS3

    with (
        SeaweedS3(volumes=max(64, 2 * nbytes // VOLUME_BYTES + 16)) as s3,
        tempfile.TemporaryDirectory() as folder,
    ):
        rig = S3Rig(s3, archive, tensors)
        store = CacheStore(folder)
        print(f"archive: {archive} ({nbytes / 1e6:.0f} MB); cache in {folder}", flush=True)
        print("\nfirst load: filling the cache vs an uncached load", flush=True)

        def filling() -> float:
            shutil.rmtree(folder, ignore_errors=True)
            return cached_load(rig, store)

        runs = alternate({"filling": filling, "uncached": lambda: timed(rig.reader_load)}, args.repeat)
        row("filling load + touch vs uncached reader.load (s3)", nbytes, runs, "filling", "uncached", None)
        cached_load(rig, store)
        stats = requests_of_a_cached_load(rig, store)
        asked = sum(purpose["requests"] for purpose in stats.values())
        print(f"\ncached reopen + load: {asked} request(s) to storage {stats}", flush=True)
        verdicts["one request"] = asked == 1
        print("\ncached reopen + load + touch vs local reader.load + touch", flush=True)
        same_page_cache(archive)
        since = cpu_times()
        runs = alternate(
            {
                "cached": lambda: cached_load(rig, store),
                "local": lambda: timed(lambda: touch(reader.load(archive).values())),
            },
            args.repeat,
        )
        row("cached reopen + load vs local reader.load", nbytes, runs, "cached", "local", TARGET)
        print(f"  {steal_note(since)}")
        verdicts["changed object is a new version"] = changed_is_a_new_version(rig, archive, store)
    print(
        "\nverdicts: " + ", ".join(f"{label}: {'PASS' if ok else 'FAIL'}" for label, ok in verdicts.items())
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
