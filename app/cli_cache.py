"""`pt2serve cache ls|prune`: what the local cache of remote archives holds, and making it smaller."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

from .cli_errors import UsageError


def add_cache_command(commands: argparse._SubParsersAction) -> None:
    cache = commands.add_parser(
        "cache",
        help="list or prune the local cache of remote archives",
        description="The cache of remote archives' bytes (--cache-dir or PT2SERVE_CACHE_DIR), kept by "
        "location and version.",
    )
    verbs = cache.add_subparsers(dest="cache_command", required=True, metavar="VERB")
    listing = verbs.add_parser("ls", help="every cached version: location, version, bytes in, last use")
    listing.add_argument("--json", action="store_true", help="print the listing as JSON")
    prune = verbs.add_parser("prune", help="remove least recently used versions down to a size")
    prune.add_argument(
        "--max-size",
        default="0",
        metavar="SIZE",
        help="keep at most SIZE on disk (bytes, or with K, M, G, T; default 0: remove every version)",
    )
    for verb in (listing, prune):
        verb.add_argument("--cache-dir", metavar="DIR", help="the cache (default: PT2SERVE_CACHE_DIR)")


async def cmd_cache(args: argparse.Namespace, write: Callable[[str], None]) -> None:
    from reader.cache import cache_store, parse_size

    store = cache_store(args.cache_dir)
    if store is None:
        raise UsageError("no cache: pass --cache-dir DIR or set PT2SERVE_CACHE_DIR")
    if args.cache_command == "prune":
        try:
            cap = parse_size(args.max_size)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        removed = store.evict(cap)
        freed = sum(info.on_disk for info in removed)
        write(f"removed {len(removed)} version(s), {_megabytes(freed)}")
        return
    versions = store.list()
    if args.json:
        write(
            json.dumps({"cache_dir": str(store.root), "versions": [v.to_dict() for v in versions]}, indent=1)
        )
        return
    rows = [["location", "version", "cached", "size", "on disk", "last used"]]
    for info in sorted(versions, key=lambda v: v.used, reverse=True):
        used = time.strftime("%Y-%m-%d %H:%M", time.localtime(info.used))
        sizes = [_megabytes(n) for n in (info.cached, info.size, info.on_disk)]
        rows.append([info.location, info.version[:16], *sizes, used])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    write(
        "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)
    )


def _megabytes(nbytes: int) -> str:
    return f"{nbytes / 1e6:,.1f} MB"
