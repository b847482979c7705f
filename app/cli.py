"""`pt2serve` command line: `pt2serve serve [ARCHIVE | id=LOCATION ...]`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .settings import Settings


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pt2serve", description="Serve tensors out of PyTorch .pt2 archives."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="serve archives over HTTP",
        description="Serve archives over HTTP. With no archive, serves the bundled demo archive. "
        "The first archive is the default one behind /tensors.",
    )
    serve.add_argument(
        "archives", nargs="*", metavar="ARCHIVE", help="LOCATION or id=LOCATION (path, URL, s3://)"
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--workers", type=int, default=1)
    serve.add_argument("--log-level", default="info")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return serve(args)
    return 2


def serve(args: argparse.Namespace) -> int:
    import os

    import uvicorn

    try:
        settings = Settings.from_environment(args.archives)
    except ValueError as exc:
        print(f"pt2serve: {exc}", file=sys.stderr)
        return 2
    # workers are separate processes: they rebuild the app from the environment
    os.environ["PT2SERVE_ARCHIVES"] = ",".join(f"{a.id}={a.location}" for a in settings.archives)
    uvicorn.run(
        "app.asgi:app",
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level=args.log_level,
        loop="uvloop",
        http="httptools",
        proxy_headers=False,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
