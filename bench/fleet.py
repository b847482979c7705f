"""A rollout to a fleet of devices through the deployment topology (scripts/topology.py on loopback).

    python bench/fleet.py [--devices 200] [--concurrency 50] [--width 768] [--depth 4]

SeaweedFS (S3) -> two pt2serve replicas (deploy/kubernetes' ConfigMap settings) -> nginx
(deploy/nginx.conf). N simulated devices each keep a mirror with `pt2serve pull` (app.pull):

1. first pull: every device pulls version 1 of a torch-written archive (testing/versioned_archives);
2. update: version 2 (two tensors changed) is uploaded over the S3 object; every device polls (a pull
   every --poll seconds, random phase) until its mirror is on version 2. Once half the fleet has
   switched, replica 0 is killed (SIGKILL): the rest of the update goes through replica 1.

Prints, per phase: wall time until the whole fleet is on the version, pull failures, mirrors not on
it, bytes delivered to devices, bytes the replicas sent (their pt2serve_response_bytes counter, replica
0's read just before the kill) against the changed bytes, and the peak RSS of nginx (master and
workers) and of each replica (VmHWM). The replicas revalidate every --revalidate seconds (the
ConfigMap's PT2SERVE_REVALIDATE_SECONDS is 30: a real update waits up to that much longer).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import random
import re
import shutil
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import topology  # noqa: E402 - scripts/ is not a package
from _host import status_kib  # noqa: E402

import reader  # noqa: E402
from app.pull import pull  # noqa: E402
from app.pull.mirror import Mirror  # noqa: E402
from testing.versioned_archives import write_version  # noqa: E402

MB = 1e6


def group_pids(pgid: int) -> list[int]:
    pids = []
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[2]) == pgid:
                pids.append(int(entry.name))
    return pids


def bytes_sent(replica: topology.Replica) -> float:
    with urllib.request.urlopen(replica.url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    return float(re.search(r"^pt2serve_response_bytes_total (\S+)$", text, re.M).group(1))


async def changed_bytes(old: pathlib.Path, new: pathlib.Path) -> tuple[int, int]:
    """(bytes of the tensors whose bytes differ, bytes of all tensors) between two versions."""
    async with reader.open_archive(old) as a, reader.open_archive(new) as b:
        total = changed = 0
        for tensor in b.tensors():
            data = await b.read(tensor.name)
            total += len(data)
            if data != await a.read(tensor.name):
                changed += len(data)
        return changed, total


@dataclass
class Phase:
    name: str
    seconds: float = 0.0
    pulls: int = 0
    failures: list[str] = field(default_factory=list)
    delivered: int = 0
    replicas_sent: float = 0.0
    behind: int = 0


class Fleet:
    def __init__(self, topo: topology.Topology, root: pathlib.Path, devices: int, concurrency: int) -> None:
        self.topo = topo
        self.url = f"{topo.url}/archives/net"
        self.mirrors = [root / f"device-{i:04d}" for i in range(devices)]
        self.slots = asyncio.Semaphore(concurrency)
        self.nginx_peak_kib = 0
        self.replica_peak_kib = [0, 0]

    def sample_rss(self) -> None:
        assert self.topo.nginx_process is not None
        nginx = sum(status_kib(pid, "VmRSS") for pid in group_pids(self.topo.nginx_process.pid))
        self.nginx_peak_kib = max(self.nginx_peak_kib, nginx)
        for index, replica in enumerate(self.topo.replicas):
            self.replica_peak_kib[index] = max(self.replica_peak_kib[index], status_kib(replica.pid, "VmHWM"))

    async def sampler(self) -> None:
        while True:
            await asyncio.to_thread(self.sample_rss)
            await asyncio.sleep(0.25)

    def version_of(self, mirror: pathlib.Path) -> str | None:
        manifest = Mirror(mirror).current_manifest()
        return manifest.get("version") if manifest else None

    async def pull_once(self, mirror: pathlib.Path, phase: Phase) -> str | None:
        async with self.slots:
            phase.pulls += 1
            try:
                report = await pull(self.url, mirror)
            except Exception as exc:  # a failed pull is a figure here, not an error of the bench
                phase.failures.append(f"{mirror.name}: {type(exc).__name__}: {exc}")
                return None
            phase.delivered += report.bytes_fetched
            return report.version

    def replicas_sent(self, killed: dict[int, float]) -> float:
        return sum(
            killed.get(i, 0.0) if i in killed else bytes_sent(r) for i, r in enumerate(self.topo.replicas)
        )

    async def first_pull(self) -> Phase:
        phase = Phase("first pull")
        before = self.replicas_sent({})
        start = time.perf_counter()
        await asyncio.gather(*(self.pull_once(m, phase) for m in self.mirrors))
        phase.seconds = time.perf_counter() - start
        phase.replicas_sent = self.replicas_sent({}) - before
        phase.behind = sum(1 for m in self.mirrors if self.version_of(m) is None)
        return phase

    async def update(self, new_archive: pathlib.Path, poll: float, deadline: float) -> tuple[Phase, str]:
        phase = Phase("update (replica 0 killed halfway)")
        old_versions = {self.version_of(m) for m in self.mirrors}
        before = self.replicas_sent({})
        killed: dict[int, float] = {}
        switched = 0
        kill_at = len(self.mirrors) // 2
        new_version: list[str] = []

        async def device(mirror: pathlib.Path) -> None:
            nonlocal switched
            await asyncio.sleep(random.uniform(0, poll))
            while time.perf_counter() - start < deadline:
                version = await self.pull_once(mirror, phase)
                if version is not None and version not in old_versions:
                    new_version.append(version)
                    switched += 1
                    if switched == kill_at and not killed:
                        killed[0] = bytes_sent(self.topo.replicas[0])
                        self.sample_rss()
                        self.topo.kill_replica(0)
                    return
                await asyncio.sleep(poll)

        start = time.perf_counter()
        self.topo.replace_archive("net", new_archive)
        await asyncio.gather(*(device(m) for m in self.mirrors))
        phase.seconds = time.perf_counter() - start
        phase.replicas_sent = self.replicas_sent(killed) - before
        target = max(set(new_version), key=new_version.count) if new_version else "?"
        phase.behind = sum(1 for m in self.mirrors if self.version_of(m) != target)
        return phase, target


def report(phase: Phase, archive_bytes: int, changed: int, devices: int) -> dict[str, object]:
    first = phase.name == "first pull"
    reference = archive_bytes if first else changed
    row = {
        "phase": phase.name,
        "seconds_until_whole_fleet": round(phase.seconds, 1),
        "pulls": phase.pulls,
        "failures": len(phase.failures),
        "mirrors_not_on_version": phase.behind,
        "delivered_MB": round(phase.delivered / MB, 1),
        "replicas_sent_MB": round(phase.replicas_sent / MB, 2),
        "reference_MB": round(reference / MB, 2),
        "replicas_sent_over_reference": round(phase.replicas_sent / reference, 3),
        "delivered_over_replicas_sent": round(phase.delivered / phase.replicas_sent, 1)
        if phase.replicas_sent
        else None,
    }
    print(
        f"{phase.name}: {devices} devices in {phase.seconds:.1f} s, {phase.pulls} pulls, "
        f"{len(phase.failures)} failed, {phase.behind} mirrors not on the version; delivered "
        f"{phase.delivered / MB:.1f} MB, replicas sent {phase.replicas_sent / MB:.2f} MB = "
        f"{row['replicas_sent_over_reference']}x the {'archive' if first else 'changed'} "
        f"bytes ({reference / MB:.2f} MB)",
        flush=True,
    )
    for failure in phase.failures[:5]:
        print(f"  failure: {failure}")
    return row


async def run(args: argparse.Namespace) -> dict[str, object]:
    work = pathlib.Path(tempfile.mkdtemp(prefix="pt2serve-fleet-"))
    try:
        v1 = write_version(work / "v1" / "net.pt2", 1, width=args.width, depth=args.depth)
        v2 = write_version(work / "v2" / "net.pt2", 2, width=args.width, depth=args.depth)
        changed, archive_bytes = await changed_bytes(v1, v2)
        print(f"archive: {archive_bytes / MB:.1f} MB of tensors, version 2 changes {changed / MB:.2f} MB")
        env = {"PT2SERVE_REVALIDATE_SECONDS": str(args.revalidate)}
        with topology.Topology({"net": v1}, replica_env=env) as topo:
            fleet = Fleet(topo, work / "devices", args.devices, args.concurrency)
            sampler = asyncio.create_task(fleet.sampler())
            try:
                first = await fleet.first_pull()
                rows = [report(first, archive_bytes, changed, args.devices)]
                update, version = await fleet.update(v2, args.poll, args.deadline)
                rows.append(report(update, archive_bytes, changed, args.devices))
            finally:
                sampler.cancel()
            rss = {
                "nginx_peak_rss_MiB (master + workers)": round(fleet.nginx_peak_kib / 1024, 1),
                "replica_peak_rss_MiB (VmHWM)": [round(k / 1024, 1) for k in fleet.replica_peak_kib],
            }
            print(f"peak RSS: nginx {rss['nginx_peak_rss_MiB (master + workers)']} MiB (master + workers), "
                  f"replicas {rss['replica_peak_rss_MiB (VmHWM)']} MiB", flush=True)  # fmt: skip
        return {
            "devices": args.devices,
            "concurrency": args.concurrency,
            "archive_MB": round(archive_bytes / MB, 2),
            "changed_MB": round(changed / MB, 2),
            "revalidate_seconds": args.revalidate,
            "new_version": version,
            "phases": rows,
            **rss,
            "load_average": os.getloadavg(),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/fleet.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", type=int, default=200, help="simulated devices (1000 for the large run)")
    parser.add_argument("--concurrency", type=int, default=50, help="pulls in flight at once")
    parser.add_argument("--width", type=int, default=768, help="the archive's layer width")
    parser.add_argument("--depth", type=int, default=4, help="the archive's layers")
    parser.add_argument("--poll", type=float, default=2.0, help="seconds between a device's pulls")
    parser.add_argument("--revalidate", type=float, default=2.0, help="PT2SERVE_REVALIDATE_SECONDS")
    parser.add_argument("--deadline", type=float, default=600.0, help="seconds the update may take")
    parser.add_argument("--json", type=pathlib.Path, help="also write the figures here")
    args = parser.parse_args(argv)
    if topology.nginx_binary() is None:
        raise SystemExit("nginx is not installed (apt-get install -y nginx)")
    result = asyncio.run(run(args))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
