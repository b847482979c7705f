"""torch.distributed.checkpoint with a process group: two ranks on the gloo backend, a CPU DeviceMesh,
DTensors placed Shard(0) (FSDP2-style) and Shard(1) (tensor-parallel style), loading an archive in S3
(SeaweedFS) through `reader.torch.StorageReader`. Each rank's local tensors equal the truth's blocks
and its reader's data bytes are counted: a dim-0 rank reads its chunks' bytes (<= 1.05x), a dim-1
rank the rows its column blocks lie in (S3 answers one range a request; docs/integrations.md)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from reader.sources import S3Settings
from testing.seaweed import free_ports, seaweed_s3  # noqa: F401 - seaweed_s3: a session fixture

pytestmark = pytest.mark.emulator
torch = pytest.importorskip("torch")

REPO = pathlib.Path(__file__).resolve().parent.parent
WORLD = 2
RANK_TIMEOUT = 240  # seconds for a rank (importing torch twice on a loaded two-core host)


@pytest.fixture(scope="module")
def uneven(tmp_path_factory) -> pathlib.Path:
    """A .pt2 whose tensors have odd sizes on both dims (the last rank's block is shorter), in
    float32, bfloat16 and int64, 1-D and 2-D; each big one over 128 KiB, so that the other rank's
    half lying between two of a rank's blocks is more than COALESCE_GAP (64 KiB) and never read."""

    class Uneven(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            generator = torch.Generator().manual_seed(49)
            self.embed = torch.nn.Parameter(torch.randn(1001, 67, generator=generator))
            self.up = torch.nn.Linear(67, 803)
            self.down = torch.nn.Linear(803, 131)
            self.register_buffer("gate", torch.randn(257, 333, generator=generator).to(torch.bfloat16))
            self.register_buffer("positions", torch.arange(40_001, dtype=torch.int64))

        def forward(self, x):
            return self.down(self.up(x + self.embed[: x.shape[0]]))

    path = tmp_path_factory.mktemp("dcp") / "uneven.pt2"
    model = Uneven()
    torch.export.save(torch.export.export(model, (torch.zeros(3, 67),)), path)
    return path


def _ranks(location: str, truth: pathlib.Path, dim: int, settings: S3Settings) -> list[dict]:
    """Both ranks' reports (testing/dcp_ranks.py), run at once as two processes."""
    (port,) = free_ports(1)
    s3 = json.dumps({"region": settings.region, "endpoint": settings.endpoint,
                     "access_key": settings.access_key, "secret_key": settings.secret_key})  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO), "MASTER_ADDR": "127.0.0.1"}

    def command(rank: int) -> list[str]:
        flags = {"--rank": rank, "--world": WORLD, "--port": port, "--location": location,
                 "--truth": truth, "--dim": dim, "--s3": s3}  # fmt: skip
        return [
            sys.executable,
            "-m",
            "testing.dcp_ranks",
            *(str(part) for item in flags.items() for part in item),
        ]

    procs = [
        subprocess.Popen(
            command(rank), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO
        )
        for rank in range(WORLD)
    ]
    reports = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=RANK_TIMEOUT)
            assert proc.returncode == 0, err[-3000:]
            reports.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return sorted(reports, key=lambda report: report["rank"])


@pytest.fixture(scope="module")
def in_s3(uneven, seaweed_s3) -> tuple[str, S3Settings]:  # noqa: F811
    key = "dcp/uneven.pt2"
    seaweed_s3.upload(seaweed_s3.private_bucket, key, uneven)
    settings = S3Settings(region=seaweed_s3.region, endpoint=seaweed_s3.endpoint,
                          access_key=seaweed_s3.access_key, secret_key=seaweed_s3.secret_key)  # fmt: skip
    return f"s3://{seaweed_s3.private_bucket}/{key}", settings


def test_dim_0_ranks_get_their_blocks_and_read_only_their_bytes(uneven, in_s3) -> None:
    location, settings = in_s3
    reports = _ranks(location, uneven, 0, settings)
    for report in reports:
        assert report["differ"] == [], report
        read = report["stats"]["data"]["bytes"]
        assert read <= 1.05 * report["share"], report
    # the two ranks' shares are the whole archive's tensors, each byte once
    assert sum(report["share"] for report in reports) == reports[0]["whole"]


def test_dim_1_ranks_get_their_blocks_reading_the_rows_they_lie_in(uneven, in_s3) -> None:
    """A dim-1 block of a row-major weight is a piece of every row: from S3 (one range a request)
    a rank reads the span of rows its pieces lie in and keeps its share; never more than the whole."""
    location, settings = in_s3
    reports = _ranks(location, uneven, 1, settings)
    for report in reports:
        assert report["differ"] == [], report
        read = report["stats"]["data"]["bytes"]
        assert report["share"] < read <= 1.05 * report["whole"], report
