"""The reader forced onto the standard zlib (a subprocess, since the library is chosen at import) still
reads every byte exactly and still refuses a flipped one. The rule's own checks (reader/zipfmt/decode.py:
ISA-L equals zlib) are in test_crc_rules.py."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from reader import zipfmt
from testing.paths import ARCHIVES, REPO, ZIP_FIXTURES
from testing.zipbytes import directory_of

pytestmark = pytest.mark.emulator


PROBE = r"""
import asyncio, hashlib, json, sys, zipfile
import reader
from reader.zipfmt import crc32, decode

async def tensors(path):
    out = {}
    async with reader.open_archive(path) as ar:
        for info in ar.tensors():
            if info.readable:
                data = await ar.read(info.name, model=info.model)
                streamed = b"".join([bytes(c) async for c in ar.stream(info.name, model=info.model)])
                assert streamed == data, info.name
                out[f"{info.model}/{info.name}"] = hashlib.sha256(data).hexdigest()
    return out

async def outcome(path):
    try:
        await tensors(path)
    except reader.IntegrityError as exc:
        return "IntegrityError: " + str(exc)
    return "read without error"

args = json.loads(sys.argv[1])
report = {"library": decode.LIBRARY, "crcs": {}, "reads": {}, "corrupt": {}}
for path in args["fixtures"]:
    with zipfile.ZipFile(path) as archive:
        report["crcs"][path] = {i.filename: crc32(archive.read(i)) for i in archive.infolist()}
for path in args["readable"]:
    report["reads"][path] = asyncio.run(tensors(path))
for path in args["corrupt"]:
    report["corrupt"][path] = asyncio.run(outcome(path))
print(json.dumps(report))
"""


def _probe(how: str, fixtures: list[str], readable: list[str], corrupt: list[str]) -> dict:
    """PROBE's report with the fast library ("fast"), forced off ("stock"), or its wheel missing
    ("missing": importing `isal` fails, as where no wheel exists)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("PT2SERVE_STOCK_ZLIB", None)
    if how == "stock":
        env["PT2SERVE_STOCK_ZLIB"] = "1"
    script = ("import sys; sys.modules['isal'] = None\n" if how == "missing" else "") + PROBE
    arguments = json.dumps({"fixtures": fixtures, "readable": readable, "corrupt": corrupt})
    done = subprocess.run(
        [sys.executable, "-c", script, arguments], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _corrupt_copies(tmp_path: pathlib.Path) -> list[str]:
    """layouts.pt2 and many_deflate.pt2, each with one byte flipped in the middle of its biggest
    payload entry's stored bytes (data, not header)."""
    paths = []
    for name in ("layouts.pt2", "many_deflate.pt2"):
        raw = bytearray((ARCHIVES / name).read_bytes())
        payloads = [entry for entry in directory_of(bytes(raw))[1] if "/data/" in entry.name]
        entry = max(payloads, key=lambda entry: entry.compressed_size)
        start = zipfmt.locate_data(entry, memoryview(bytes(raw))[entry.header_offset : entry.region_end])
        raw[start + entry.compressed_size // 2] ^= 0x01
        path = tmp_path / f"flipped-{name}"
        path.write_bytes(bytes(raw))
        paths.append(str(path))
    return paths


def test_the_reader_forced_onto_stock_zlib_reads_the_same_bytes_and_refuses_a_flipped_byte(tmp_path) -> None:
    fixtures = [str(path) for path in ZIP_FIXTURES]
    readable = [str(ARCHIVES / name) for name in ("layouts.pt2", "many_deflate.pt2", "dtypes.pt2")]
    corrupt = _corrupt_copies(tmp_path)
    fast = _probe("fast", fixtures, readable, corrupt)
    assert fast["library"] == "isal" and all(fast["reads"].values())
    reports = {"fast": fast}
    for how in ("stock", "missing"):
        fallback = reports[how] = _probe(how, fixtures, readable, corrupt)
        assert fallback["library"] == "zlib", how
        assert fallback["crcs"] == fast["crcs"], how
        assert fallback["reads"] == fast["reads"], how
    for how, report in reports.items():
        for path in corrupt:
            assert report["corrupt"][path].startswith("IntegrityError"), (how, path, report["corrupt"][path])
