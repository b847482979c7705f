"""Where `pt2serve get` and `export` write: resumable files, atomic files, stdout, a progress bar.

`get` appends to a partial file and keeps a resume record beside it, so a resumed
download never joins bytes of two archive versions; `export` writes FILE.partial
and renames it when complete. Failures are CliError, one line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import IO, Any

from .cli_errors import CliError

PROGRESS_THRESHOLD = 1 << 20  # a progress bar (on a terminal) from this size up


class ResumeRecord:
    """FILE.pt2serve-part: which archive version and output a partial FILE holds.

    A resumed download must not join bytes of two archive versions: the record
    is written when a download starts, checked before resuming, removed when done.
    """

    def __init__(self, output: str, fields: dict[str, str]) -> None:
        """`fields`: the archive identity and whatever else names the output (tensor, order, format)."""
        self.path = None if output == "-" else f"{output}.pt2serve-part"
        self.output = output
        self.fields = fields

    def check(self) -> bool:
        """Raise if a partial FILE belongs to another archive version; False if it has no record."""
        if self.path is None or not os.path.exists(self.output) or not os.path.getsize(self.output):
            return True
        try:
            with open(self.path) as handle:
                saved = json.load(handle)
        except FileNotFoundError:
            return False
        except (OSError, ValueError):
            saved = None
        if saved != self.fields:
            raise CliError(
                "SourceChanged",
                f"{self.output} is a partial download of another archive version or tensor; "
                "not resuming (pass --no-resume to start over)",
            )
        return True

    def save(self) -> None:
        if self.path is not None:
            with open(self.path, "w") as handle:
                json.dump(self.fields, handle)

    def remove(self) -> None:
        if self.path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.path)


@contextlib.contextmanager
def open_output(path: str, *, resume: bool) -> Iterator[tuple[IO[bytes], int]]:
    """Yield (binary file positioned at its end, bytes already there); '-' is stdout (never resumed)."""
    if path == "-":
        yield sys.stdout.buffer, 0
        sys.stdout.buffer.flush()
        return
    if os.path.isdir(path):
        raise CliError("IsADirectoryError", f"{path} is a directory")
    with open(path, "ab" if resume else "wb") as out:
        yield out, out.tell()


def existing_prefix(path: str, n: int) -> bytes:
    with open(path, "rb") as f:
        return f.read(n)


def size_of(out: IO[bytes]) -> int | None:
    try:
        return os.fstat(out.fileno()).st_size if os.path.isfile(out.name) else None  # type: ignore[arg-type]
    except (OSError, AttributeError, TypeError, ValueError):
        return None


def cut_back(out: IO[bytes], size: int) -> None:
    """A regular file's output cut back to `size` bytes (a pipe keeps what it was sent)."""
    out.flush()
    with contextlib.suppress(OSError, ValueError):  # stdout, a pipe: not a file to cut
        if os.path.isfile(out.name):  # type: ignore[arg-type]
            out.truncate(size)


async def check_resumed(path: str, body: Any, have: int, label: str) -> None:
    """A download resumed at `have` bytes: check the part it resumed inside (a tensor's or a file's
    bytes), whose bytes no whole-entry read checked: those before `have` came from an earlier run,
    the rest from a read of part of an entry, which no CRC-32 covers. Its entry's CRC-32 is taken over
    the file's bytes (and the archive's bytes of the entry outside them). A part that fails is cut
    off, so a run again fetches it whole; every other part was checked as it was written."""

    offset = 0
    for part in _leaves(body):
        start, offset = offset, offset + part.length
        if not start < have < offset:
            continue
        entry = getattr(part, "entry", None)
        if entry is None or not getattr(part, "direct", True) or not getattr(part, "needs_payload", True):
            return  # bytes built in memory (headers, zeros), or a view gathered from one checked read
        first, end = getattr(part, "span", (0, entry.size))
        crc = await _archive_crc(part.fetcher, entry, 0, first, 0)
        crc = await asyncio.to_thread(_file_crc, path, start, part.length, crc)
        crc = await _archive_crc(part.fetcher, entry, end, entry.size, crc)
        if crc != entry.crc32:
            os.truncate(path, start)
            raise CliError(
                "IntegrityError",
                f"{path}: the resumed download of {label} does not match the archive's CRC-32 of entry "
                f"{entry.name!r}; its bytes from offset {start} were removed (run the command again)",
            )
        return


def _leaves(body: Any) -> Iterator[Any]:
    """The parts of a body in order, nested concatenations opened."""
    parts = getattr(body, "parts", None)
    if parts is None:
        yield body
        return
    for part in parts:
        yield from _leaves(part)


async def _archive_crc(fetcher: Any, entry: Any, start: int, end: int, crc: int) -> int:
    """`crc` carried over the entry's content bytes [start, end), read in chunks."""
    from reader import zipfmt

    async for chunk in fetcher.chunks(entry, start, end):
        crc = zipfmt.crc32(chunk, crc)
    return crc


def _file_crc(path: str, start: int, length: int, crc: int) -> int:
    from reader import zipfmt

    buffer = memoryview(bytearray(min(length, 8 << 20)))
    with open(path, "rb", buffering=0) as file:
        file.seek(start)
        while length:
            nbytes = file.readinto(buffer[: min(length, len(buffer))])
            if not nbytes:
                raise CliError("IncompleteOutput", f"{path} ended while its bytes were checked")
            crc = zipfmt.crc32(buffer[:nbytes], crc)
            length -= nbytes
    return crc


async def copy_chunks(
    chunks: AsyncIterator[bytes | memoryview], out: IO[bytes], advance: Callable[[int], None]
) -> None:
    """Write every chunk, reporting progress; the stream is closed however this ends."""
    async with contextlib.aclosing(chunks) as stream:  # type: ignore[type-var]
        async for chunk in stream:
            out.write(chunk)
            advance(len(chunk))


def add_progress_option(parser: argparse.ArgumentParser) -> None:
    """`--progress/--no-progress`, the switch `progress` reads (None: on a terminal, for large totals)."""
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=f"progress bar on stderr (default: on a terminal, for {PROGRESS_THRESHOLD >> 20} MiB and more)",
    )


@contextlib.contextmanager
def progress(
    args: argparse.Namespace, total: int, label: str, done: int = 0
) -> Iterator[Callable[[int], None]]:
    """Yield `advance(n)`; draws a rich progress bar on stderr when asked or on a terminal."""
    show = args.progress
    if show is None:
        show = total >= PROGRESS_THRESHOLD and sys.stderr.isatty()
    if not show:
        yield lambda n: None
        return
    try:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )
    except ImportError:  # rich is a dependency; a broken install still downloads, without the bar
        if args.progress:
            print("pt2serve: warning: no progress bar (the rich package is missing)", file=sys.stderr)
        yield lambda n: None
        return

    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
               TimeRemainingColumn())  # fmt: skip
    console = Console(stderr=True)
    began, moved = time.monotonic(), 0

    def advance(n: int) -> None:
        nonlocal moved
        moved += n
        bar.advance(task, n)

    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task(label if len(label) <= 40 else "…" + label[-39:], total=total, completed=done)
        yield advance
    console.print(throughput_line(label, moved, time.monotonic() - began), highlight=False)


def throughput_line(label: str, nbytes: int, seconds: float) -> str:
    """What a finished transfer moved, in how long, how fast (the bar's speed is a recent one)."""
    rate = nbytes / seconds / 1e6 if seconds > 0 else 0.0
    return f"{label}: {nbytes / 1e6:,.1f} MB in {seconds:.2f} s ({rate:,.0f} MB/s)"


@contextlib.contextmanager
def atomic_output(path: str) -> Iterator[IO[bytes]]:
    """Write to PATH.partial and rename it to PATH on success; '-' is stdout."""
    if path == "-":
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    if os.path.isdir(path):
        raise CliError("IsADirectoryError", f"{path} is a directory")
    partial = path + ".partial"
    try:
        with open(partial, "wb") as out:
            yield out
        os.replace(partial, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)
