"""`pt2serve diff A B`: what changed between two archives, as a table or JSON.

Exit status as diff(1) has it: 0 identical, 1 they differ, 2 trouble (usage, an archive that
cannot be opened or read). A comparison that reads much draws a progress bar on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from typing import Any

from .cli_output import add_progress_option, progress

DIFFER = "differs"  # set on the namespace by cmd_diff: the answer the exit status gives


def add_parser(commands: Any) -> argparse.ArgumentParser:
    diff = commands.add_parser(
        "diff",
        help="what changed between two archives (exit 0 identical, 1 different, 2 trouble)",
        description="Compare two archives (any LOCATIONs, any containers) tensor by tensor: same (proven "
        "by CRC-32 or SHA-256, reading nothing that the metadata proves), changed (with max |a-b|, "
        "relative L2, cosine, fraction of elements that differ), retyped, moved, added, removed.",
        epilog="examples:\n  pt2serve diff v1/model.pt2 v2/model.pt2\n"
        "  pt2serve diff s3://models/a.pt2 model.pt --prefix encoder. --json | jq .summary",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    diff.add_argument("a", metavar="A", help="the old archive's LOCATION")
    diff.add_argument("b", metavar="B", help="the new archive's LOCATION")
    diff.add_argument("--prefix", help="only tensors whose name starts with this")
    diff.add_argument("--model", help="the model compared on both sides (default: each one's only model)")
    diff.add_argument("--exact", action="store_true", help="figures from full passes, never a sample")
    diff.add_argument("--json", action="store_true", help="print the comparison as JSON")
    add_progress_option(diff)
    return diff


async def cmd_diff(args: argparse.Namespace, http_options: Any) -> None:
    import reader

    with contextlib.ExitStack() as bars:
        shown = {"advance": None, "done": 0}

        def advanced(done: int, total: int) -> None:
            if shown["advance"] is None:
                shown["advance"] = bars.enter_context(progress(args, total, "compared"))
            shown["advance"](done - shown["done"])  # type: ignore[operator]
            shown["done"] = done

        async with (
            reader.open_archive(args.a, http_options=http_options) as a,
            reader.open_archive(args.b, http_options=http_options) as b,
        ):
            diff = await reader.compare(
                a,
                b,
                model_a=args.model,
                model_b=args.model,
                prefix=args.prefix,
                exact=args.exact,
                progress=advanced,
            )
    setattr(args, DIFFER, not diff.identical)
    if args.json:
        sys.stdout.write(json.dumps(diff.to_dict(), indent=1) + "\n")
    else:
        _print_table(diff)


def exit_status(run_status: int, args: argparse.Namespace) -> int:
    """diff(1)'s: a failure of the run (1 from run_command) is trouble, 2."""
    if run_status != 0:
        return 2 if run_status == 1 else run_status
    return 1 if getattr(args, DIFFER, False) else 0


def _print_table(diff: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False, soft_wrap=True)
    summary = diff.summary()
    counts = ", ".join(f"{n} {status}" for status, n in summary["counts"].items() if n)
    if diff.identical:
        console.print(f"identical: {counts or 'no tensors'}")
        return
    table = Table(box=None, pad_edge=False)
    for column, justify in (("status", "left"), ("name", "left"), ("dtype / shape", "left"),
                            ("rel. L2", "right"), ("max |a-b|", "right"), ("differ", "right")):  # fmt: skip
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for t in diff.tensors:
        if t.status == "same":
            continue
        info = t.b if t.b is not None else t.a
        shape = _dtype_shape(info)
        if t.status == "retyped":
            shape = f"{_dtype_shape(t.a)} -> {shape}"
        name = f"{t.moved_from} -> {t.name}" if t.moved_from else t.name
        cells = ["", "", ""]
        if t.figures is not None:
            f = t.figures.to_dict()
            cells = [_num(f["relative_l2"]), _num(f["max_abs_diff"]), f"{f['fraction_differ']:.2%}"]
            if f["sampled"]:
                cells[2] += " (sampled)"
        table.add_row(t.status, name, shape, *cells)
    console.print(table)
    console.print(f"{counts}; {summary['bytes_differ']:,} bytes differ")


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _dtype_shape(info: Any) -> str:
    """A TensorInfo's dtype and sizes for the table ([] where it has none: a custom object)."""
    return f"{info.dtype} {[] if info.sizes is None else list(info.sizes)}"
