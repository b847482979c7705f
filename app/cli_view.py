"""`pt2serve view LOCATION [LOCATION_B]`: the viewer on one archive (or the compare view of two).

Starts the service in this process on 127.0.0.1 (a free port unless --port), opens the system
browser on the page (Python's webbrowser: $BROWSER, else the desktop's), prints the URL, and
stops on Ctrl-C with exit status 0. The archives open before the browser does; one that fails
to open ends the command with status 1 and its error.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import socket
import sys
import threading
import webbrowser
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from .settings import ArchiveSpec, Settings, ca_bundle_from, stem_of


def add_parser(commands: Any) -> argparse.ArgumentParser:
    view = commands.add_parser(
        "view",
        help="open the browser viewer on an archive (two: the compare view)",
        description="Serve LOCATION (and LOCATION_B) on 127.0.0.1 and open the browser on the viewer: "
        "its tensors and graph, or with two archives what changed between them. Ctrl-C stops it.",
        epilog="examples:\n  pt2serve view model.pt2\n  pt2serve view hf://org/model/model.pt2\n"
        "  pt2serve view v1/model.pt2 v2/model.pt2        the compare view\n"
        "  pt2serve view s3://bucket/model.pt2 --no-browser",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    view.add_argument("location", metavar="LOCATION", help="a path, http(s)://, s3://, gs://, az:// or hf://")
    view.add_argument("location_b", metavar="LOCATION_B", nargs="?", help="a second archive: compare view")
    view.add_argument("--no-browser", action="store_true", help="print the URL only")
    view.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    return view


def view_specs(locations: Sequence[str]) -> tuple[ArchiveSpec, ...]:
    """One archive per location, named by its stem (`-2` when both have the same); paths made absolute."""
    specs: list[ArchiveSpec] = []
    for location in locations:
        if "://" not in location:
            location = os.path.abspath(location)
        archive_id = stem_of(location).replace("/", "-") or "archive"
        if any(spec.id == archive_id for spec in specs):
            archive_id += "-2"
        specs.append(ArchiveSpec(archive_id, location))
    return tuple(specs)


def page_url(port: int, specs: Sequence[ArchiveSpec]) -> str:
    ids = [quote(spec.id, safe="") for spec in specs]
    fragment = f"#/compare/{ids[0]}/{ids[1]}" if len(ids) == 2 else f"#/archive/{ids[0]}"
    return f"http://127.0.0.1:{port}/{fragment}"


def cmd_view(args: argparse.Namespace) -> int:
    import uvicorn

    from .main import create_app
    from .protocol import HTTP_PROTOCOL

    locations = [args.location] + ([args.location_b] if args.location_b else [])
    try:
        settings = dataclasses.replace(
            Settings.from_environment(["unused"]),
            archives=view_specs(locations),
            ca_bundle=args.ca_bundle or ca_bundle_from(os.environ),
            revalidate_seconds=0,
        )
    except ValueError as exc:
        print(f"pt2serve view: error: {exc}", file=sys.stderr)
        return 2
    app = create_app(settings)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", args.port))
    except OSError as exc:
        print(f"pt2serve view: error: port {args.port}: {exc}", file=sys.stderr)
        return 2
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", http=HTTP_PROTOCOL, access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    failed: list[str] = []

    async def announce() -> None:
        while not server.started:
            if server.should_exit:
                return
            await asyncio.sleep(0.05)
        failed.extend(
            f"{slot.spec.id}: {slot.error}"
            for slot in app.state.registry.slots.values()
            if slot.status == "error"
        )
        if failed:
            server.should_exit = True
            return
        url = page_url(port, settings.archives)
        print(f"pt2serve view: {url}  (Ctrl-C stops)", flush=True)
        if not args.no_browser:  # a thread: a $BROWSER command may run until its window closes
            threading.Thread(target=_open_browser, args=(url,), daemon=True).start()

    async def run() -> None:
        announcing = asyncio.create_task(announce())
        try:
            await server.serve(sockets=[sock])
        finally:
            announcing.cancel()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:  # uvicorn shut down, then passed the signal on
        pass
    finally:
        sock.close()
    for failure in failed:
        print(f"pt2serve: {failure}", file=sys.stderr)
    return 1 if failed else 0


def _open_browser(url: str) -> None:
    if not webbrowser.open(url):
        print(f"pt2serve view: no browser found; open {url}", file=sys.stderr, flush=True)
