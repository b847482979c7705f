"""`pt2serve` command line: serve archives, or list, inspect, download and export their tensors.

    pt2serve serve [ARCHIVE | id=LOCATION ...] [--allow-open PATTERN ...]
    pt2serve view LOCATION [LOCATION_B] [--no-browser]      (the browser viewer; two: compare)
    pt2serve ls LOCATION [--model M] [--json]
    pt2serve layout LOCATION NAME [--model M]
    pt2serve get LOCATION NAME -o FILE [--format raw|npy] [--order default|contiguous] [--model M]
    pt2serve get LOCATION --executorch NAME.pte -o FILE       (a program the archive carries)
    pt2serve export LOCATION -o FILE.safetensors|FILE.ptd [--format safetensors|ptd] [--prefix P] [--model M]
    pt2serve pull URL DIR [--model M] [--prefix P] [--name N ...]

LOCATION is a path, an http(s):// URL, s3://bucket/key, gs://bucket/object, az://container/blob or
hf://[datasets/]repo[@revision]/path (docs/remote-reads.md: credentials and version pinning).
Exit status: 0 success, 1 the archive or the output failed (one line on stderr:
`pt2serve: <ErrorClass>: message`), 2 bad usage, 130 interrupted. `get` resumes a partial
FILE: it continues from the file's length and checks the final size.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from . import cli_diff, cli_view
from .cli_cache import add_cache_command, cmd_cache
from .cli_errors import CliError, UsageError
from .cli_output import (
    ResumeRecord,
    add_progress_option,
    atomic_output,
    check_resumed,
    copy_chunks,
    cut_back,
    existing_prefix,
    open_output,
    progress,
    size_of,
)
from .settings import Settings, ca_bundle_from

EPILOG = """\
LOCATION is a file path, an http(s):// URL (redirects followed), s3://bucket/key,
gs://bucket/object, az://container/blob or hf://[datasets/]repo[@revision]/path; a
*.index.json (pytorch_model.bin.index.json) is the sharded checkpoint it indexes.
  s3://  credentials, region and endpoint as the AWS CLI finds them (AWS_* variables,
         ~/.aws/credentials and ~/.aws/config with AWS_PROFILE, SSO, roles, container and instance
         credentials); PT2SERVE_S3_ENDPOINT overrides the endpoint, --no-sign-request skips signing
  gs://  Application Default Credentials (pip install 'pt2serve[gcs]'); STORAGE_EMULATOR_HOST
  az://  AZURE_STORAGE_CONNECTION_STRING, AZURE_STORAGE_ACCOUNT_NAME with _ACCOUNT_KEY or
         _SAS_TOKEN, or Entra ID (pip install 'pt2serve[azure]')
  hf://  HF_TOKEN or the token file of `hf auth login`; HF_ENDPOINT
Proxies come from HTTP(S)_PROXY / ALL_PROXY / NO_PROXY; https trusts the system store,
SSL_CERT_FILE / SSL_CERT_DIR and --ca-bundle.

examples:
  pt2serve serve                                   serve the bundled demo archive on :8000
  pt2serve serve gpt2=s3://models/gpt2.pt2         serve an archive from S3 under the id gpt2
  pt2serve serve --allow-open 'hf://org/*'         ... and let the viewer open hf://org/ archives
  pt2serve view model.pt2                          the browser viewer on an archive
  pt2serve view v1/model.pt2 v2/model.pt2          ... on what changed between two
  pt2serve ls model.pt2                            table of every tensor
  pt2serve ls https://host/model.pt2 --json        the same as JSON
  pt2serve ls hf://org/model/pytorch_model.bin.index.json   every shard's tensors, as one
  pt2serve layout model.pt2 linear.weight          one tensor's layout (dtype, sizes, strides, ...)
  pt2serve get model.pt2 linear.weight -o w.npy --format npy
  pt2serve get s3://models/big.pt2 embed.weight -o embed.bin     (run again to resume)
  pt2serve export model.pt2 -o model.safetensors --prefix encoder.
  pt2serve export s3://models/big.pt2 -o weights.ptd      ExecuTorch data file (run again to resume)
  pt2serve get model.pt2 --executorch model.pte -o model.pte   a program the archive carries
  pt2serve pull http://host:8000/archives/gpt2 weights/      mirror; run again to update
                                                   (only changed tensors move)

https trusts the system's CAs, SSL_CERT_FILE, SSL_CERT_DIR and --ca-bundle (PT2SERVE_CA_BUNDLE);
HTTP_PROXY, HTTPS_PROXY, ALL_PROXY and NO_PROXY are honoured (docs/remote-reads.md).

exit status: 0 ok, 1 archive/source/output error, 2 usage error, 130 interrupted.
"""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (exit status 2) instead of usage + error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("pt2serve")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
        release = "unknown"
    parser = _Parser(
        prog="pt2serve",
        description="Serve, list, inspect and download tensors of PyTorch .pt2 archives "
        "(from a path, an http(s) URL, s3://, gs://, az:// or hf://), without PyTorch.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"pt2serve {release}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = commands.add_parser(
        "serve",
        help="serve archives over HTTP",
        description="Serve archives over HTTP. With no archive, serves the bundled demo archive. "
        "The first archive is the default one behind /tensors.",
    )
    serve.add_argument(
        "archives",
        nargs="*",
        metavar="ARCHIVE",
        help="LOCATION or id=LOCATION (path, URL, s3://, gs://, az://, hf://)",
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--workers", type=int, default=1)
    serve.add_argument("--log-level", default="info")
    serve.add_argument(
        "--access-log",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="one log line per request (default: off, or PT2SERVE_ACCESS_LOG)",
    )
    serve.add_argument(
        "--allow-open",
        action="append",
        default=None,
        metavar="PATTERN",
        help="let clients open locations matching PATTERN (repeatable; default PT2SERVE_ALLOW_OPEN), read "
        "with this server's credentials. Matched part by part: 'hf://org/*', 's3://team/**', "
        "'https://*.example.com/models/**', 'http://10.0.0.5:8000/m/*.pt2', '/srv/models/**'; '*' stays "
        "within a host label or a path segment, '**' spans segments; no port: the default one, ':*' "
        "any; a query only with '?*'. http(s) reaches global unicast addresses only, unless a pattern "
        "names the host (then on its port and path only)",
    )
    serve.add_argument(
        "--open-max",
        type=_positive_int,
        default=None,
        metavar="N",
        help="opened archives kept; past N the least recently used closes (default PT2SERVE_OPEN_MAX, 16)",
    )
    serve.add_argument(
        "--allowed-host",
        action="append",
        default=None,
        metavar="NAME",
        help="a Host name a token-less service answers on loopback besides localhost, 127.0.0.1 and "
        "[::1] (DNS rebinding; '*.example.com': its subdomains, '*': any); repeatable; default "
        "PT2SERVE_ALLOWED_HOSTS",
    )
    serve.add_argument(
        "--trusted-proxy",
        action="append",
        default=None,
        metavar="ADDRESS",
        help="a reverse proxy's address or network (10.0.0.5, 10.0.0.0/8; repeatable or "
        "comma-separated; default PT2SERVE_TRUSTED_PROXIES): behind it, the open rate limit keys on "
        "the client its X-Forwarded-For names",
    )
    serve.add_argument(
        "--max-header-bytes",
        type=_positive_int,
        default=None,
        metavar="N",
        help="the most bytes a request line and its header fields may take; past it 431 (default "
        "PT2SERVE_MAX_HEADER_BYTES, 65536)",
    )
    _add_parallel_options(serve)
    _add_trust_option(serve)

    location = {
        "metavar": "LOCATION",
        "help": "archive: a path, an http(s):// URL, s3://, gs://, az:// or hf://",
    }
    model_help = "model name (default: the only model, else 'model')"

    ls = commands.add_parser(
        "ls",
        help="list an archive's tensors",
        description="List the tensors of an archive: name, kind, dtype, shape and bytes "
        "(a model column is added when the archive holds several models).",
        epilog="examples:\n  pt2serve ls model.pt2\n  pt2serve ls s3://bucket/model.pt2 --json | jq .models",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ls.add_argument("location", **location)
    ls.add_argument("--model", help="only this model's tensors (default: every model)")
    ls.add_argument("--json", action="store_true", help="print {models, tensors: [layout, ...]} as JSON")
    _add_trust_option(ls)

    layout = commands.add_parser(
        "layout",
        help="print one tensor's layout as JSON",
        description="Print one tensor's layout as JSON: dtype, sizes, strides, storage_offset, "
        "dim_order, dense, nbytes, storage entry and more.",
        epilog="example:\n  pt2serve layout model.pt2 linear.weight",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    layout.add_argument("location", **location)
    layout.add_argument("name", metavar="NAME", help="the tensor's fully qualified name")
    layout.add_argument("--model", help=model_help)
    _add_trust_option(layout)

    get = commands.add_parser(
        "get",
        help="download one tensor to a file (resumable)",
        description="Download one tensor's bytes to FILE, raw or as an .npy file. If FILE exists and is "
        "shorter than the result, the download continues from FILE's length (run the same command "
        "again after an interruption); the final size is checked.",
        epilog="examples:\n"
        "  pt2serve get model.pt2 linear.weight -o weight.bin\n"
        "  pt2serve get https://host/model.pt2 linear.weight -o weight.npy --format npy\n"
        "  pt2serve get model.pt2 linear.weight -o - --order contiguous | xxd | head",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    get.add_argument("location", **location)
    get.add_argument("name", metavar="NAME", help="the tensor's fully qualified name")
    get.add_argument("-o", "--output", required=True, metavar="FILE", help="output file ('-': stdout)")
    get.add_argument(
        "--format", choices=("raw", "npy"), default="raw", help="raw bytes (default) or an .npy file"
    )
    get.add_argument(
        "--order",
        choices=("default", "contiguous"),
        default=None,
        help="raw only: default = memory order (see the layout's dim_order), contiguous = row-major; "
        ".npy files are always row-major",
    )
    get.add_argument("--model", help=model_help)
    get.add_argument(
        "--executorch",
        action="store_true",
        help="NAME is an ExecuTorch program the archive carries (data/executorch/NAME), fetched as stored",
    )
    get.add_argument("--no-resume", action="store_true", help="overwrite FILE instead of resuming it")
    _add_transfer_options(get)

    export = commands.add_parser(
        "export",
        help="write tensors as one .safetensors or ExecuTorch .ptd file",
        description="Write a model's tensors as one file, streamed: safetensors (row-major; tensors it "
        "cannot hold are listed in __metadata__['pt2serve.skipped']) or an ExecuTorch .ptd data file "
        "(FlatTensor; keys are the names a .pte exported with external constants asks for; a partial "
        ".ptd is resumed like `get`). Tensors the format cannot hold (complex, pickled, custom "
        "objects, ...) are skipped with a warning.",
        epilog="examples:\n"
        "  pt2serve export model.pt2 -o model.safetensors\n"
        "  pt2serve export s3://bucket/model.pt2 -o enc.safetensors --prefix encoder.\n"
        "  pt2serve export model.pt2 -o weights.ptd --format ptd",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    export.add_argument("location", **location)
    export.add_argument("-o", "--output", required=True, metavar="FILE", help="output file ('-': stdout)")
    export.add_argument("--prefix", default="", help="only tensors whose name starts with this")
    export.add_argument("--model", help=model_help)
    export.add_argument(
        "--format",
        choices=("safetensors", "ptd"),
        default=None,
        help="output format (default: ptd when FILE ends in .ptd, else safetensors)",
    )
    export.add_argument(
        "--alignment", type=_positive_int, default=None, metavar="BYTES",
        help="ptd only: segment alignment, a power of two (default 128, as ExecuTorch)",
    )  # fmt: skip
    export.add_argument(
        "--no-resume", action="store_true", help="ptd only: overwrite FILE instead of resuming it"
    )
    _add_transfer_options(export)

    pull = commands.add_parser(
        "pull",
        help="mirror an archive's tensors into a directory; updates move only changed tensors",
        description="Mirror a served archive (URL: http://host/archives/ID, or its /manifest URL) or an "
        "archive itself (a path, s3://, gs://, az://, hf://, or an http(s) URL ending in .pt2) into DIR: "
        "one file per tensor "
        "under DIR/current/MODEL/NAME plus DIR/current/manifest.json. Run it again to update: only "
        "tensors whose SHA-256 changed are downloaded, every byte is checked against its digest, "
        "interrupted downloads resume, and DIR/current switches to the new version in one rename.",
        epilog="examples:\n"
        "  pt2serve pull http://127.0.0.1:8000/archives/demo weights/\n"
        "  pt2serve pull s3://bucket/model.pt2 weights/ --prefix encoder.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    pull.add_argument("url", metavar="URL", help="a served archive's URL, or an archive LOCATION")
    pull.add_argument("directory", metavar="DIR", help="the mirror directory (created if missing)")
    pull.add_argument("--model", help="only this model's tensors (default: every model)")
    pull.add_argument("--prefix", help="only tensors whose name starts with this")
    pull.add_argument("--name", action="append", help="only this tensor (repeatable)")
    pull.add_argument("--json", action="store_true", help="print the report as JSON")
    add_progress_option(pull)
    _add_trust_option(pull)
    _add_trust_option(cli_diff.add_parser(commands))
    _add_trust_option(cli_view.add_parser(commands))
    for command in commands.choices.values():
        command.add_argument(
            "--no-sign-request",
            action="store_true",
            help="send s3:// requests unsigned (public buckets; the same as AWS_NO_SIGN_REQUEST=1)",
        )
        command.add_argument(
            "--cache-dir",
            metavar="DIR",
            help="keep what remote reads fetch in DIR, by version; reopens revalidate once "
            "(the same as PT2SERVE_CACHE_DIR; docs/cache.md)",
        )
        command.add_argument(
            "--offline",
            action="store_true",
            help="read remote archives from the cache only, with no request (PT2SERVE_OFFLINE=1)",
        )
    add_cache_command(commands)
    return parser


def _add_transfer_options(parser: argparse.ArgumentParser) -> None:
    add_progress_option(parser)
    parser.add_argument(
        "--chunk-size", type=_positive_int, default=None, metavar="BYTES", help="read size (default 4 MiB)"
    )
    _add_parallel_options(parser)
    _add_trust_option(parser)


def _add_trust_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ca-bundle",
        metavar="PATH",
        default=None,
        help="https: also trust the CA certificates in PATH (a PEM file, or a directory hashed by "
        "`openssl rehash`), besides the system's, SSL_CERT_FILE and SSL_CERT_DIR "
        "(default: PT2SERVE_CA_BUNDLE)",
    )


def _add_parallel_options(parser: argparse.ArgumentParser) -> None:
    """Unset: the library's defaults (reader.sources.HttpOptions; for serve, the PT2SERVE_PARALLEL_PARTS /
    PT2SERVE_PART_SIZE settings first)."""
    parser.add_argument(
        "--parallel",
        type=_positive_int,
        default=None,
        metavar="N",
        help="remote reads over 16 MiB: up to N ranged GETs at once (1: one stream; default: "
        "HttpOptions.parallel_parts, docs/remote-reads.md)",
    )
    parser.add_argument(
        "--part-size",
        type=_positive_int,
        default=None,
        metavar="BYTES",
        help="bytes per part of a parallel read (memory: N x BYTES; default: HttpOptions.part_size)",
    )


def _http_options(args: argparse.Namespace):  # -> reader.sources.HttpOptions (imported lazily)
    from reader.sources import HttpOptions

    given = {"parallel_parts": getattr(args, "parallel", None), "part_size": getattr(args, "part_size", None)}
    transfer = {name: value for name, value in given.items() if value is not None}
    return HttpOptions(ca_bundle=args.ca_bundle or ca_bundle_from(os.environ), **transfer)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "no_sign_request", False):  # the environment, so `serve` workers see it too
        os.environ["AWS_NO_SIGN_REQUEST"] = "1"
    if args.command != "cache":  # (the cache command's --cache-dir names the cache it lists)
        _library_defaults(args)
    if args.command != "serve":  # (the service logs it as it logs everything)
        say_when_stale()
    return _commands()[args.command](args)


def _library_defaults(args: argparse.Namespace) -> None:
    """--cache-dir and --offline as the library's own defaults, so `serve` workers see them too."""
    if args.cache_dir or args.offline:
        from reader.cache import CACHE_DIR_ENV, OFFLINE_ENV

        if args.cache_dir:
            os.environ[CACHE_DIR_ENV] = args.cache_dir
        if args.offline:
            os.environ[OFFLINE_ENV] = "1"


def _commands() -> dict[str, Callable[[argparse.Namespace], int]]:
    """Every command by its name: what runs it and gives its exit status (the one dispatch)."""

    def run(command: Callable[[argparse.Namespace], Any]) -> Callable[[argparse.Namespace], int]:
        return lambda args: run_command(command, args)

    def diff(args: argparse.Namespace) -> int:
        return cli_diff.exit_status(run_command(lambda a: cli_diff.cmd_diff(a, _http_options(a)), args), args)

    return {
        "serve": serve,
        "ls": run(cmd_ls),
        "layout": run(cmd_layout),
        "get": run(cmd_get),
        "export": run(cmd_export),
        "pull": run(cmd_pull),
        "cache": run(lambda args: cmd_cache(args, _write_stdout)),
        "diff": diff,
        "view": cli_view.cmd_view,
    }


class _StaleLine(logging.Handler):
    """The reader's word that a cached version is read because its origin could not be reached
    (stale-if-error, docs/cache.md), as one line on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        print(" ".join(f"pt2serve: warning: {record.getMessage()}".split()), file=sys.stderr)


def say_when_stale() -> None:
    """Every verb working from a stale cached version says so (`serve` logs it as the service logs)."""
    cache_log = logging.getLogger("reader.cache")
    if not any(isinstance(handler, _StaleLine) for handler in cache_log.handlers):
        cache_log.addHandler(_StaleLine(logging.WARNING))
        cache_log.propagate = False


def run_command(command: Callable[[argparse.Namespace], Any], args: argparse.Namespace) -> int:
    """Run an async command; every failure becomes one line on stderr and an exit status."""
    import reader

    try:
        asyncio.run(command(args))
    except (UsageError, reader.LocationError) as exc:
        return _fail(f"pt2serve {args.command}: error: {exc}", 2)
    except reader.ReaderError as exc:
        return _fail(f"pt2serve: {type(exc).__name__}: {exc}", 1)
    except CliError as exc:
        return _fail(f"pt2serve: {exc.name}: {exc}", 1)
    except KeyboardInterrupt:
        return _fail("pt2serve: interrupted", 130)
    except BrokenPipeError:
        # the reader of our stdout went away (`| head`): quiet exit, no flush error at shutdown
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as exc:
        return _fail(f"pt2serve: {type(exc).__name__}: {exc}", 1)
    except Exception as exc:  # a bug: still one line, unless PT2SERVE_DEBUG asks for the traceback
        if os.environ.get("PT2SERVE_DEBUG"):
            raise
        name = type(exc).__name__
        return _fail(f"pt2serve: internal error: {name}: {exc} (PT2SERVE_DEBUG=1 shows the traceback)", 1)
    return 0


def _fail(message: str, status: int) -> int:
    print(" ".join(message.split()), file=sys.stderr)
    return status


# -- ls / layout -------------------------------------------------------------------------------------


async def cmd_ls(args: argparse.Namespace) -> None:

    import reader

    async with reader.open_archive(args.location, http_options=_http_options(args)) as ar:
        tensors = ar.tensors(model=args.model)
        models, container, unreadable = ar.models, ar.container, ar.unreadable
    if args.json:
        listing = {"models": models, "container": container, "unreadable": unreadable}
        _write_stdout(json.dumps({**listing, "tensors": [t.to_dict() for t in tensors]}, indent=1))
    else:
        _write_stdout(_ls_table(tensors))
    if args.model is None:
        for reason in unreadable.values():
            print(f"pt2serve: note: {reason}", file=sys.stderr)
    if not any(t.readable for t in tensors):
        why = "; ".join(unreadable.values()) or f"the {container} archive lists no tensors with raw bytes"
        raise CliError("NothingReadable", f"{args.location}: nothing readable: {why}")


def _ls_table(tensors: list) -> str:
    several = len({t.model for t in tensors}) > 1
    notes = any(not t.readable for t in tensors)
    header = (
        (["model"] if several else [])
        + ["name", "kind", "dtype", "shape", "bytes"]
        + (["note"] if notes else [])
    )
    rows = [header]
    for t in tensors:
        shape = "[" + ", ".join(str(s) for s in t.sizes) + "]" if t.sizes is not None else "?"
        size = str(t.nbytes) if t.readable and t.nbytes is not None else "-"
        note = [t.unsupported or ""] if notes else []
        rows.append(([t.model] if several else []) + [t.name, t.kind, t.dtype or "-", shape, size, *note])
    return _table(rows, right=header.index("bytes"))


def _table(rows: list[list[str]], right: int) -> str:
    """Columns padded to their widest cell, column `right` right-aligned."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            cell.rjust(w) if i == right else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


async def cmd_layout(args: argparse.Namespace) -> None:

    import reader

    async with reader.open_archive(args.location, http_options=_http_options(args)) as ar:
        info = ar.layout(args.name, model=args.model)
    _write_stdout(json.dumps(info.to_dict(), indent=1))


def _write_stdout(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


# -- get ---------------------------------------------------------------------------------------------


async def cmd_get(args: argparse.Namespace) -> None:
    import reader
    from reader.formats.body import Body
    from reader.formats.npy import npy_body, npy_header

    if args.executorch:
        if args.format != "raw" or args.order or args.model:
            raise UsageError("--executorch fetches a stored file as is: drop --format, --order and --model")
        async with reader.open_archive(args.location, http_options=_http_options(args)) as ar:
            program = ar.executorch_file(args.name)
            fields = {"identity": ar.source.identity, "executorch": args.name}
            await write_resumable(args, program, fields, args.name)
        return
    if args.format == "npy" and args.order == "default":
        raise UsageError("--format npy writes row-major bytes; drop --order default (or use --format raw)")
    order = "contiguous" if args.format == "npy" else args.order or "default"
    async with reader.open_archive(args.location, http_options=_http_options(args)) as ar:
        tensor = ar.tensor(args.name, model=args.model, order=order)
        info = tensor.info
        body: Body = npy_body(tensor) if args.format == "npy" else tensor
        fields = {"identity": ar.source.identity, "model": info.model, "name": info.name, "order": order,
                  "format": args.format}  # fmt: skip
        header = npy_header(info) if args.format == "npy" else b""
        await write_resumable(args, body, fields, info.name, header)


async def write_resumable(
    args: argparse.Namespace, body: Any, fields: dict[str, str], label: str, header: bytes = b""
) -> None:
    """Append `body` to args.output from the length it already has (unless --no-resume).

    A resume record beside the file says which archive version and which output it holds,
    and a partial file must start with `header` (the part of the output fixed by layouts),
    so a resumed file never joins bytes of two different outputs; the final size is checked.
    """
    from reader import IntegrityError
    from reader.sources import DEFAULT_CHUNK_SIZE

    record = ResumeRecord(args.output, fields)
    verified = record.check() if not args.no_resume else True
    with open_output(args.output, resume=not args.no_resume) as (out, have):
        if have > body.length:
            raise CliError(
                "OutputMismatch",
                f"{args.output} has {have} bytes, more than the {body.length} of {label}; it is not a "
                "partial download of it (remove it or pass --no-resume)",
            )
        if have and header and existing_prefix(args.output, min(have, len(header))) != header[:have]:
            raise CliError(
                "OutputMismatch",
                f"{args.output} does not start with the header of {label}; not resuming "
                "(remove it or pass --no-resume)",
            )
        if have and not verified:
            print(f"pt2serve: warning: {args.output} has no resume record; resuming without being "
                  "able to check it comes from the same archive version", file=sys.stderr)  # fmt: skip
        record.save()
        with progress(args, body.length, label, done=have) as advance:
            chunks = body.chunks(have, body.length, args.chunk_size or DEFAULT_CHUNK_SIZE)
            try:
                await copy_chunks(chunks, out, advance)
            except IntegrityError:
                cut_back(out, have)  # the bytes this run wrote came from an entry that failed its check
                raise
        out.flush()
        written = size_of(out)
    if written is not None and written != body.length:
        raise CliError("IncompleteOutput", f"{args.output} has {written} bytes, expected {body.length}")
    if have and args.output != "-":
        await check_resumed(args.output, body, have, label)
    record.remove()


# -- export ------------------------------------------------------------------------------------------


async def cmd_export(args: argparse.Namespace) -> None:
    import reader
    from reader.formats import ptd, safetensors
    from reader.formats.selection import select
    from reader.sources import DEFAULT_CHUNK_SIZE

    fmt = args.format or ("ptd" if args.output.endswith(".ptd") else "safetensors")
    if fmt != "ptd" and args.alignment is not None:
        raise UsageError("--alignment is for --format ptd")
    writable = ptd.writable if fmt == "ptd" else safetensors.writable
    async with reader.open_archive(args.location, http_options=_http_options(args)) as ar:
        selection = select(ar, writable, fmt, model=args.model, prefix=args.prefix)
        for t in selection.skipped:
            reason = t.unsupported or f"dtype {t.dtype} has no {fmt} type"
            print(f"pt2serve: warning: skipping {t.name}: {reason}", file=sys.stderr)
        if not selection.chosen:
            what = f" starting with {args.prefix!r}" if args.prefix else ""
            model = ar.resolve_model(args.model)
            raise CliError("NothingToExport", f"no writable tensors{what} in model {model!r}")
        label = os.path.basename(args.output)
        if fmt == "ptd":
            alignment = args.alignment or ptd.DEFAULT_ALIGNMENT
            try:
                plan = ptd.plan_ptd(selection.chosen, alignment)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
            body = ptd.ptd_body(plan, lambda info, order: ar.tensor(info.name, model=info.model, order=order))
            fields = {"identity": ar.source.identity, "format": "ptd", "alignment": str(alignment),
                      "tensors": ",".join(f"{t.model}/{t.name}" for t in selection.chosen)}  # fmt: skip
            await write_resumable(args, body, fields, f"this .ptd ({label})", plan.head)
            return
        tensors = [ar.tensor(t.name, model=t.model, order="contiguous") for t in selection.chosen]
        body = safetensors.safetensors_body(tensors, {"format": "pt"}, [t.name for t in selection.skipped])
        with atomic_output(args.output) as out, progress(args, body.length, label) as advance:
            await copy_chunks(
                body.chunks(0, body.length, args.chunk_size or DEFAULT_CHUNK_SIZE), out, advance
            )
            out.flush()
            written = size_of(out)
            if written is not None and written != body.length:
                raise CliError(
                    "IncompleteOutput", f"{args.output} has {written} bytes, expected {body.length}"
                )


# -- pull --------------------------------------------------------------------------------------------


async def cmd_pull(args: argparse.Namespace) -> None:
    import dataclasses

    from .pull import pull

    report = await pull(
        args.url,
        args.directory,
        model=args.model,
        prefix=args.prefix,
        names=args.name,
        progress=lambda total: progress(args, total, "pull"),
        http_options=_http_options(args),
    )
    if args.json:
        _write_stdout(json.dumps(dataclasses.asdict(report), indent=1))
        return
    state = "updated to" if report.switched else "already at"
    print(
        f"{args.directory}: {state} version {report.version}: {report.tensors} tensors, "
        f"{report.fetched} fetched ({report.bytes_fetched} bytes), {report.reused} reused "
        f"({report.bytes_reused} bytes)",
        file=sys.stderr,
    )
    for name in report.skipped:
        print(f"pt2serve: warning: skipped {name} (not readable as raw bytes)", file=sys.stderr)


# -- serve -------------------------------------------------------------------------------------------


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from .open_limits import TrustedProxies
    from .protocol import HTTP_PROTOCOL

    # workers are separate processes: they read these settings from the environment
    if args.allow_open:
        os.environ["PT2SERVE_ALLOW_OPEN"] = "\n".join(args.allow_open)
    if args.open_max is not None:
        os.environ["PT2SERVE_OPEN_MAX"] = str(args.open_max)
    if args.allowed_host:
        os.environ["PT2SERVE_ALLOWED_HOSTS"] = ",".join(args.allowed_host)
    if args.trusted_proxy:
        os.environ["PT2SERVE_TRUSTED_PROXIES"] = ",".join(args.trusted_proxy)
    if args.max_header_bytes is not None:
        os.environ["PT2SERVE_MAX_HEADER_BYTES"] = str(args.max_header_bytes)
    try:
        settings = Settings.from_environment(args.archives)
        TrustedProxies(settings.trusted_proxies)  # a malformed address is a usage error, here
    except ValueError as exc:
        print(f"pt2serve: {exc}", file=sys.stderr)
        return 2
    # workers are separate processes: they rebuild the app from the environment
    os.environ["PT2SERVE_ARCHIVES"] = ",".join(f"{a.id}={a.location}" for a in settings.archives)
    if args.parallel is not None:
        os.environ["PT2SERVE_PARALLEL_PARTS"] = str(args.parallel)
    if args.part_size is not None:
        os.environ["PT2SERVE_PART_SIZE"] = str(args.part_size)
    if args.ca_bundle is not None:
        os.environ["PT2SERVE_CA_BUNDLE"] = args.ca_bundle
    access_log = settings.access_log if args.access_log is None else args.access_log
    uvicorn.run(
        "app.asgi:app",
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level=args.log_level,
        loop="uvloop",
        http=HTTP_PROTOCOL,
        proxy_headers=False,
        access_log=access_log,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
