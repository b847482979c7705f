"""The CRC-32 and inflate rule (reader/zipfmt/decode.py): ISA-L where its wheel is installed, the
standard zlib otherwise, with identical results; the reader forced onto the fallback still reads
every byte exactly and still refuses a flipped one."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import zipfile
import zlib

import numpy as np
import pytest

from reader import zipfmt
from reader.zipfmt import decode
from testing.paths import ARCHIVES

pytestmark = pytest.mark.emulator

isal_zlib = pytest.importorskip("isal.isal_zlib")

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = sorted(
    path
    for path in (ROOT / "tests" / "fixtures").rglob("*")
    if path.suffix in (".pt2", ".pt") and zipfile.is_zipfile(path)
)

# Run in a subprocess (the library is chosen at import): every entry's CRC-32 by the rule, every
# readable tensor's bytes (read and stream), and what reading the corrupt copies given does.
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
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
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


def test_the_fast_crc_equals_zlib_on_random_data_chained_in_any_pieces() -> None:
    rng = np.random.default_rng(34)
    for size in (0, 1, 7, 63, 64, 4099, (1 << 20) + 5, 9 << 20):
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        assert isal_zlib.crc32(data) == zlib.crc32(data), size
        for start in (0, 1, 0xFFFFFFFF, 0x12345678):
            assert isal_zlib.crc32(data, start) == zlib.crc32(data, start), (size, start)
        cuts = sorted(rng.integers(0, size + 1, 5).tolist()) if size else []
        fast = stock = 0
        for low, high in zip([0, *cuts], [*cuts, size], strict=True):
            fast = isal_zlib.crc32(memoryview(data)[low:high], fast)
            stock = zlib.crc32(data[low:high], stock)
        assert fast == stock == zlib.crc32(data), size


def test_the_rule_uses_isal_here_and_agrees_with_every_fixture_entrys_directory_crc() -> None:
    assert decode.LIBRARY == "isal" and zipfmt.crc32 is isal_zlib.crc32
    assert len(FIXTURES) >= 9
    entries = 0
    for path in FIXTURES:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                content = archive.read(info)  # zipfile checks its CRC with the standard zlib
                assert zipfmt.crc32(content) == zlib.crc32(content) == info.CRC, (path.name, info.filename)
                entries += 1
    assert entries > 50


def test_the_fast_inflater_gives_zlibs_content_for_every_deflate_entry() -> None:
    """many_deflate.pt2 through EntryDecoder (ISA-L, in bounded pieces, fed in odd-sized chunks)
    equals what zipfile's stock-zlib inflate gives."""
    path = ARCHIVES / "many_deflate.pt2"
    raw = path.read_bytes()
    deflated = 0
    with zipfile.ZipFile(path) as archive:
        directory = {entry.name: entry for entry in _entries(raw)}
        for info in archive.infolist():
            entry = directory[info.filename]
            if info.compress_type != zipfile.ZIP_DEFLATED:
                continue
            start = zipfmt.locate_data(entry, memoryview(raw)[entry.header_offset : entry.region_end])
            stored = memoryview(raw)[start : start + entry.compressed_size]
            decoder = zipfmt.EntryDecoder(entry)
            out = bytearray()
            for at in range(0, len(stored), 7777):
                for piece in decoder.feed(stored[at : at + 7777]):
                    out += piece
            decoder.finish()
            assert bytes(out) == archive.read(info), info.filename
            deflated += 1
    assert deflated > 5


def _entries(raw: bytes) -> tuple[zipfmt.ZipEntry, ...]:
    """The central directory of a whole archive held in memory (every fixture is small)."""
    span = zipfmt.locate_directory(raw, 0, len(raw))
    assert isinstance(span, zipfmt.DirectorySpan)
    return zipfmt.parse_central_directory(raw[span.offset : span.end], span)


def _corrupt_copies(tmp_path: pathlib.Path) -> list[str]:
    """layouts.pt2 and many_deflate.pt2, each with one byte flipped in the middle of its biggest
    payload entry's stored bytes (data, not header)."""
    paths = []
    for name in ("layouts.pt2", "many_deflate.pt2"):
        raw = bytearray((ARCHIVES / name).read_bytes())
        payloads = [entry for entry in _entries(bytes(raw)) if "/data/" in entry.name]
        entry = max(payloads, key=lambda entry: entry.compressed_size)
        start = zipfmt.locate_data(entry, memoryview(bytes(raw))[entry.header_offset : entry.region_end])
        raw[start + entry.compressed_size // 2] ^= 0x01
        path = tmp_path / f"flipped-{name}"
        path.write_bytes(bytes(raw))
        paths.append(str(path))
    return paths


def test_the_reader_forced_onto_stock_zlib_reads_the_same_bytes_and_refuses_a_flipped_byte(tmp_path) -> None:
    fixtures = [str(path) for path in FIXTURES]
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
