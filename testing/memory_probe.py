"""Peak memory of one scenario, measured in a process of its own (its peak resident set, VmHWM).

`probe(scenario, *args)` runs `python -m testing.memory_probe SCENARIO ARGS...` and returns what the
scenario returned (JSON) with `peak_rss` (bytes) beside it. The scenarios are the work an archive's
author can set in motion: opening an archive, its graph, Ranges of a service over it, a comparison.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
from typing import Any

TIMEOUT = 300


def probe(scenario: str, *args: object) -> dict[str, Any]:
    """Run `scenario` in a fresh interpreter; its result and its peak RSS in bytes."""
    done = subprocess.run(
        [sys.executable, "-m", "testing.memory_probe", scenario, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=os.environ.copy(),
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


async def _open(path: str) -> dict[str, Any]:
    """Open an archive and ask for its first model's graph twice."""
    import reader

    try:
        async with reader.open_archive(path) as ar:
            outcome: dict[str, Any] = {"opened": True, "graph": []}
            for _ in range(2):
                requests = ar.stats.get("data", {}).get("requests", 0)
                try:
                    await ar.graph()
                    outcome["graph"].append("ok")
                except reader.ReaderError as error:
                    outcome["graph"].append(f"{type(error).__name__}: {error}")
                outcome.setdefault("requests", []).append(
                    ar.stats.get("data", {}).get("requests", 0) - requests
                )
            return outcome
    except reader.ReaderError as error:
        return {"opened": False, "error": f"{type(error).__name__}: {error}"}


async def _service_ranges(*paths: str) -> dict[str, Any]:
    """A service over the archives (digests computed ahead, as `serve` does for local archives):
    once that work is done, a 1-byte Range of every tensor of each."""
    from testing.service import in_process, make_app

    specs = [f"a{i}={path}" for i, path in enumerate(paths)]
    app = make_app(specs, digests_ahead="local")
    answers = []
    async with in_process(app) as client:
        for slot in app.state.registry.slots.values():
            if slot.current is not None and slot.current.ahead is not None:
                await slot.current.ahead
        for archive_id in (f"a{i}" for i in range(len(paths))):
            listing = (await client.get(f"/archives/{archive_id}/tensors")).json()
            for layout in listing["tensors"]:
                name, nbytes = layout["name"], layout["nbytes"]
                at = nbytes // 2
                response = await client.get(
                    f"/archives/{archive_id}/tensors/{name}/data",
                    params={"order": "contiguous"},
                    headers={"range": f"bytes={at}-{at}"},
                )
                answers.append([name, response.status_code, response.content.hex()])
        health = await client.get("/healthz")
    return {"answers": answers, "healthz": health.status_code}


async def _compare(path_a: str, path_b: str, exact: str = "") -> dict[str, Any]:
    """A comparison of two archives (sampled, or `exact`): each name's status and figures."""
    import reader

    async with reader.open_archive(path_a) as a, reader.open_archive(path_b) as b:
        comparison = await reader.compare(a, b, exact=bool(exact))
    return {
        "statuses": {t.name: t.status for t in comparison.tensors},
        "figures": {t.name: t.figures.to_dict() for t in comparison.tensors if t.figures is not None},
    }


async def _stream_dropped(url: str, max_buffered: str, how: str = "iter_load") -> dict[str, Any]:
    """Every tensor of `url` within `max_buffered`, hashed and dropped as it lands (a loader copying
    to a GPU): through `reader.torch.iter_load`, or (`how="safe_open"`) `reader.safe_open`'s
    `get_tensor` over `keys()`. The hashes, and the resident set before the load (VmHWM is reset to
    it, so `peak_rss` is the load's peak)."""
    import hashlib

    import torch  # noqa: F401 - imported before the baseline (reader.torch imports it when first used)

    import reader
    import reader.torch

    hashes = {}
    if how == "safe_open":
        with reader.safe_open(url, max_buffered=int(max_buffered)) as handle:
            before = _reset_peak()
            for name in handle.keys():  # noqa: SIM118 - safetensors handles have keys(), no __iter__
                tensor = handle.get_tensor(name)
                hashes[name] = hashlib.sha256(tensor.numpy().data).hexdigest()  # no copy
                del tensor
        return {"hashes": hashes, "rss_before": before}
    async with reader.open_archive(url) as archive:
        before = _reset_peak()
        async for name, tensor in reader.torch.iter_load(archive, max_buffered=int(max_buffered)):
            hashes[name] = hashlib.sha256(tensor.numpy().data).hexdigest()  # no copy
            del tensor
    return {"hashes": hashes, "rss_before": before}


def _reset_peak() -> int:
    """VmHWM := VmRSS; the resident set now."""
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")
    return _status("VmRSS:")


SCENARIOS = {
    "open": _open,
    "service_ranges": _service_ranges,
    "compare": _compare,
    "stream_dropped": _stream_dropped,
}


def _status(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    raise LookupError(field)


def peak_rss() -> int:
    """This process's peak resident set in bytes: VmHWM, which starts afresh at exec (ru_maxrss keeps
    the peak of the process that forked this one, a test runner holding hundreds of MB)."""
    try:
        return _status("VmHWM:")
    except LookupError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def main() -> None:
    scenario, *args = sys.argv[1:]
    result = asyncio.run(SCENARIOS[scenario](*args))
    result["peak_rss"] = peak_rss()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
