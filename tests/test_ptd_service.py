"""The .ptd route of an s3:// archive, and the CLI's export and get of the .ptd and of ExecuTorch program
files (in a subprocess). The in-process route checks are in test_ptd_service_rules.py."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from testing import ptd_files
from testing.paths import ARCHIVES
from testing.ptd_files import PROGRAM, library_ptd
from testing.seaweed import SeaweedS3
from testing.service import in_process, make_app, run
from testing.torch_oracle import needs_torch

carrying = ptd_files.carrying  # the fixture: an archive carrying ExecuTorch program files

pytestmark = pytest.mark.emulator


def test_ptd_of_an_s3_archive_equals_the_local_one(seaweed_s3: SeaweedS3, monkeypatch) -> None:
    seaweed_s3.upload(seaweed_s3.private_bucket, "ptd/layouts.pt2", ARCHIVES / "layouts.pt2")
    for variable, value in {
        "AWS_ENDPOINT_URL": seaweed_s3.endpoint,
        "AWS_ACCESS_KEY_ID": seaweed_s3.access_key,
        "AWS_SECRET_ACCESS_KEY": seaweed_s3.secret_key,
        "AWS_REGION": seaweed_s3.region,
    }.items():
        monkeypatch.setenv(variable, value)
    specs = [f"local={ARCHIVES / 'layouts.pt2'}", f"remote=s3://{seaweed_s3.private_bucket}/ptd/layouts.pt2"]

    async def check() -> None:
        async with in_process(make_app(specs)) as client:
            local = await client.get("/archives/local/ptd")
            remote = await client.get("/archives/remote/ptd")
            assert remote.status_code == 200 and remote.content == local.content
            middle = {"range": f"bytes=300-{len(local.content) - 300}"}
            part = await client.get("/archives/remote/ptd", headers=middle)
            assert part.status_code == 206 and part.content == local.content[300:-299]

    run(check())


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=120,
                          env=os.environ.copy())  # fmt: skip


@needs_torch
def test_cli_gets_a_program_with_resume(carrying: pathlib.Path, tmp_path: pathlib.Path) -> None:
    out = tmp_path / "model.pte"
    out.write_bytes(PROGRAM[:12345])  # an interrupted download
    done = cli("get", str(carrying), "--executorch", "model.pte", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == PROGRAM
    missing = cli("get", str(carrying), "--executorch", "nope.pte", "-o", str(tmp_path / "x"))
    assert missing.returncode == 1 and "FileNotFound" in missing.stderr
    usage = cli(
        "get", str(carrying), "--executorch", "model.pte", "--format", "npy", "-o", str(tmp_path / "y")
    )
    assert usage.returncode == 2


def test_cli_export_ptd_equals_the_route_and_resumes(tmp_path: pathlib.Path) -> None:
    plan, expected = run(library_ptd(ARCHIVES / "dtypes.pt2"))
    out = tmp_path / "weights.ptd"
    done = cli("export", str(ARCHIVES / "dtypes.pt2"), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == expected and "skipping t_complex64" in done.stderr
    assert not (tmp_path / "weights.ptd.pt2serve-part").exists()
    # interrupted inside the FlatBuffer, then inside a segment: each run completes the file
    for cut in (200, plan.segments[3].offset + 1):
        out.write_bytes(expected[:cut])
        again = cli("export", str(ARCHIVES / "dtypes.pt2"), "-o", str(out), "--format", "ptd")
        assert again.returncode == 0, again.stderr
        assert out.read_bytes() == expected
    # a partial file of another .ptd (another alignment) is refused, not joined
    out.write_bytes(expected[:100])
    other = cli("export", str(ARCHIVES / "dtypes.pt2"), "-o", str(out), "--alignment", "4096")
    assert other.returncode == 1 and "OutputMismatch" in other.stderr
    aligned = cli(
        "export", str(ARCHIVES / "dtypes.pt2"), "-o", str(out), "--alignment", "4096", "--no-resume"
    )
    assert (
        aligned.returncode == 0
        and out.read_bytes() == run(library_ptd(ARCHIVES / "dtypes.pt2", None, 4096))[1]
    )
    bad = cli("export", str(ARCHIVES / "dtypes.pt2"), "-o", str(tmp_path / "b.ptd"), "--alignment", "3")
    assert bad.returncode == 2 and "alignment" in bad.stderr
