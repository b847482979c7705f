"""The `pt2serve` console script, run for real in subprocesses: local files, HTTP, S3, resume, errors."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import shutil
import signal
import struct
import subprocess
import sys
import sysconfig
import time

import numpy as np
import pytest

import reader
from testing.checks import run
from testing.cli import TIMEOUT, acli, cli, console_script, one_line_error
from testing.cli import reader_bytes as _reader_bytes
from testing.faultserver import Drip, FaultServer
from testing.paths import ARCHIVES
from testing.zipbytes import write_pt2

pytestmark = pytest.mark.emulator

REPO = pathlib.Path(__file__).resolve().parent.parent


async def _reader_tensors(location, model: str | None = None):
    async with reader.open_archive(location) as ar:
        return ar.models, ar.tensors(model=model)


@pytest.fixture(scope="module")
def big_archive(tmp_path_factory) -> pathlib.Path:
    """A synthetic archive with one 8 MiB tensor (progress bar and resume territory)."""
    path = tmp_path_factory.mktemp("big") / "big.pt2"
    rng = np.random.default_rng(7)
    write_pt2(
        path,
        {
            "big.weight": (7, [1024, 2048], rng.standard_normal((1024, 2048), dtype=np.float32).tobytes()),
            "small": (7, [4], np.arange(4, dtype=np.float32).tobytes()),
        },
    )
    return path


# -- help and usage ----------------------------------------------------------------------------------


def test_help_reads_well():
    top = cli("--help")
    assert top.returncode == 0
    for word in ("serve", "ls", "layout", "get", "export", "examples:", "s3://", "exit status"):
        assert word in top.stdout
    for command in ("serve", "ls", "layout", "get", "export"):
        sub = cli(command, "--help")
        assert sub.returncode == 0, sub.stderr
        assert f"usage: pt2serve {command}" in sub.stdout


@pytest.mark.parametrize(
    "args, fragment",
    [
        ((), "required: COMMAND"),
        (("ls",), "LOCATION"),
        (("get", ARCHIVES / "layouts.pt2", "lin1.weight", "-o", "x", "--format", "bad"), "--format"),
        (("get", ARCHIVES / "layouts.pt2", "lin1.weight"), "-o/--output"),
        (("frobnicate",), "invalid choice"),
    ],
)
def test_usage_errors_are_one_line_exit_2(args, fragment):
    result = cli(*args)
    assert result.returncode == 2
    one_line_error(result.stderr, "pt2serve")
    assert fragment in result.stderr


def test_npy_with_memory_order_is_a_usage_error(tmp_path):
    result = cli("get", ARCHIVES / "layouts.pt2", "transposed", "-o", tmp_path / "t.npy",
                 "--format", "npy", "--order", "default")  # fmt: skip
    assert result.returncode == 2
    one_line_error(result.stderr, "pt2serve get: error: --format npy")


def test_unknown_scheme_is_a_usage_error_listing_the_supported_ones():
    result = cli("ls", "ftp://example.invalid/model.pt2")
    assert result.returncode == 2, result.stderr
    one_line_error(result.stderr, "pt2serve ls: error: unsupported location scheme 'ftp'")
    for scheme in ("http://", "https://", "s3://", "gs://", "az://", "hf://", "file://"):
        assert scheme in result.stderr


@pytest.mark.parametrize(
    "args, error",
    [
        (("ls", "/nonexistent/model.pt2"), "pt2serve: SourceError: cannot open /nonexistent/model.pt2"),
        (("ls", REPO / "README.md"), "pt2serve: ArchiveFormatError:"),
        (("layout", ARCHIVES / "layouts.pt2", "no.such.tensor"), "pt2serve: TensorNotFound:"),
        (("ls", ARCHIVES / "layouts.pt2", "--model", "nope"), "pt2serve: ModelNotFound:"),
        (("get", ARCHIVES / "pickled.pt2", "sub", "-o", "{tmp}/sub.bin"), "pt2serve: UnsupportedPayload:"),
        (("export", ARCHIVES / "two_models.pt2", "-o", "{tmp}/x.safetensors"), "pt2serve: ModelNotFound:"),
    ],
)
def test_reader_errors_are_one_line_exit_1(tmp_path, args, error):
    args = [str(a).replace("{tmp}", str(tmp_path)) for a in args]
    result = cli(*args)
    assert result.returncode == 1, result.stderr
    one_line_error(result.stderr, error)
    assert result.stdout == ""


# -- ls / layout -------------------------------------------------------------------------------------


def test_ls_table_and_json_match_the_reader():
    location = ARCHIVES / "layouts.pt2"
    models, tensors = run(_reader_tensors(location))
    table = cli("ls", location)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["name", "kind", "dtype", "shape", "bytes"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == {t.name for t in tensors}
    for t in tensors:
        assert rows[t.name].split()[-1] == str(t.nbytes)
        assert "[" + ", ".join(map(str, t.sizes)) + "]" in rows[t.name]
        assert f" {t.dtype} " in rows[t.name]

    listed = cli("ls", location, "--json")
    assert listed.returncode == 0
    assert json.loads(listed.stdout) == {
        "models": models,
        "container": "pt2",
        "unreadable": {},
        "tensors": [t.to_dict() for t in tensors],
    }


def test_ls_model_column_and_filter():
    location = ARCHIVES / "two_models.pt2"
    models, tensors = run(_reader_tensors(location))
    assert len(models) > 1
    every = cli("ls", location)
    assert every.stdout.splitlines()[0].split()[0] == "model"
    assert len(every.stdout.splitlines()) == 1 + len(tensors)
    one = cli("ls", location, "--model", models[0], "--json")
    data = json.loads(one.stdout)
    assert data["tensors"] and {t["model"] for t in data["tensors"]} == {models[0]}


def test_ls_notes_unsupported_entries():
    result = cli("ls", ARCHIVES / "pickled.pt2")
    assert result.returncode == 0
    assert result.stdout.splitlines()[0].split()[-1] == "note"
    assert "pickled" in result.stdout


def test_layout_is_the_reader_layout():
    async def expected():
        async with reader.open_archive(ARCHIVES / "layouts.pt2") as ar:
            return ar.layout("transposed").to_dict()

    result = cli("layout", ARCHIVES / "layouts.pt2", "transposed")
    assert result.returncode == 0
    assert json.loads(result.stdout) == run(expected())


# -- get / export, local -----------------------------------------------------------------------------


def test_get_raw_contiguous_and_npy_are_byte_exact(tmp_path):
    location = ARCHIVES / "layouts.pt2"
    name = "transposed"  # a non-row-major dense tensor: memory order differs from row-major
    for order in ("default", "contiguous"):
        out = tmp_path / f"{order}.bin"
        result = cli("get", location, name, "-o", out, "--order", order)
        assert result.returncode == 0, result.stderr
        assert out.read_bytes() == run(_reader_bytes(location, name, order))
    out = tmp_path / "t.npy"
    assert cli("get", location, name, "-o", out, "--format", "npy").returncode == 0

    async def array():
        async with reader.open_archive(location) as ar:
            return await ar.read_numpy(name)

    np.testing.assert_array_equal(np.load(out), run(array()))
    stdout = subprocess.run([*console_script(), "get", str(location), name, "-o", "-"],
                            capture_output=True, timeout=TIMEOUT)  # fmt: skip
    assert stdout.returncode == 0 and stdout.stdout == run(_reader_bytes(location, name))


def _safetensors_header(path: pathlib.Path) -> dict:
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8 : 8 + length])


def test_export_safetensors(tmp_path):
    from safetensors.numpy import load_file

    location = ARCHIVES / "layouts.pt2"
    out = tmp_path / "layouts.safetensors"
    result = cli("export", location, "-o", out)
    assert result.returncode == 0, result.stderr
    loaded = load_file(out)
    _, tensors = run(_reader_tensors(location))
    assert set(loaded) == {t.name for t in tensors}
    for t in tensors:
        assert loaded[t.name].tobytes() == run(_reader_bytes(location, t.name, "contiguous"))
    assert not (tmp_path / "layouts.safetensors.partial").exists()

    prefixed = tmp_path / "lin.safetensors"
    assert cli("export", location, "-o", prefixed, "--prefix", "lin").returncode == 0
    assert set(load_file(prefixed)) == {t.name for t in tensors if t.name.startswith("lin")}


def test_export_skips_unwritable_with_warnings(tmp_path):
    out = tmp_path / "dtypes.safetensors"
    result = cli("export", ARCHIVES / "dtypes.pt2", "-o", out)
    assert result.returncode == 0, result.stderr
    warnings = result.stderr.strip().splitlines()
    assert warnings and all(line.startswith("pt2serve: warning: skipping ") for line in warnings)
    header = _safetensors_header(out)
    skipped = header["__metadata__"]["pt2serve.skipped"].split(",")
    assert len(skipped) == len(warnings)
    assert not set(skipped) & set(header)
    data = out.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    assert len(data) == 8 + length + max(v["data_offsets"][1] for v in tensors.values())
    for name, entry in tensors.items():
        begin, end = entry["data_offsets"]
        blob = data[8 + length + begin : 8 + length + end]
        assert blob == run(_reader_bytes(ARCHIVES / "dtypes.pt2", name, "contiguous"))


# -- resume ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["raw", "npy"])
def test_get_resumes_truncated_files(tmp_path, big_archive, fmt):
    from reader.formats.npy import npy_header

    async def expected():
        async with reader.open_archive(big_archive) as ar:
            info = ar.layout("big.weight")
            head = npy_header(info) if fmt == "npy" else b""
            return head + await ar.read("big.weight", order="contiguous")

    full = run(expected())
    for cut in (7, 200_001, len(full) - 1, len(full)):
        out = tmp_path / f"cut{cut}.{fmt}"
        out.write_bytes(full[:cut])
        result = cli("get", big_archive, "big.weight", "-o", out, "--format", fmt, "--no-progress")
        assert result.returncode == 0, result.stderr
        assert out.read_bytes() == full, cut


def test_get_refuses_to_resume_a_different_file(tmp_path, big_archive):
    out = tmp_path / "other.bin"
    out.write_bytes(b"x" * 100)
    result = cli("get", big_archive, "small", "-o", out)  # small is 16 bytes: 100 cannot be a part of it
    assert result.returncode == 1
    one_line_error(result.stderr, "pt2serve: OutputMismatch:")
    assert out.read_bytes() == b"x" * 100
    again = cli("get", big_archive, "small", "-o", out, "--no-resume")
    assert again.returncode == 0
    assert out.read_bytes() == np.arange(4, dtype=np.float32).tobytes()


def test_get_will_not_join_two_archive_versions(tmp_path, big_archive):
    archive = tmp_path / "copy.pt2"
    shutil.copy(big_archive, archive)
    full = run(_reader_bytes(archive, "big.weight"))
    out = tmp_path / "w.bin"
    out.write_bytes(full[:1000])

    async def identity() -> str:
        async with reader.open_archive(archive) as ar:
            return ar.source.identity

    record = {"identity": run(identity()), "model": "model", "name": "big.weight", "order": "default",
              "format": "raw"}  # fmt: skip
    (tmp_path / "w.bin.pt2serve-part").write_text(json.dumps(record))
    os.utime(archive, (1, 1))  # the archive is replaced (its identity changes) while the file is partial
    refused = cli("get", archive, "big.weight", "-o", out, "--no-progress")
    assert refused.returncode == 1
    one_line_error(refused.stderr, "pt2serve: SourceChanged:")
    assert out.read_bytes() == full[:1000]
    record["identity"] = run(identity())
    (tmp_path / "w.bin.pt2serve-part").write_text(json.dumps(record))
    resumed = cli("get", archive, "big.weight", "-o", out, "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    assert out.read_bytes() == full
    assert not (tmp_path / "w.bin.pt2serve-part").exists()  # the record goes when the file is complete


def test_progress_bar_on_request(tmp_path, big_archive):
    result = cli("get", big_archive, "big.weight", "-o", tmp_path / "w.bin", "--progress")
    assert result.returncode == 0
    assert "big.weight" in result.stderr and "MB" in result.stderr


def _interruptible() -> None:
    """In the child: Ctrl-C as a terminal sends it. A test run started in the background by a
    non-interactive shell inherits SIGINT ignored, and Python (rightly) keeps ignoring it, so the
    download would run to its end."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


async def _interrupt_then_resume(tmp_path: pathlib.Path, big_archive: pathlib.Path, sig: int):
    data = big_archive.read_bytes()
    out = tmp_path / "w.bin"
    expected = await _reader_bytes(big_archive, "big.weight")
    async with FaultServer() as server:
        server.put("/big.pt2", data)
        # ~3 MB/s: the 8 MiB tensor takes seconds, so the process is interrupted mid-download
        server.faults.append(Drip(times=None, chunk_size=64 << 10, interval=0.02))
        proc = await asyncio.create_subprocess_exec(
            *console_script(), "get", server.url("/big.pt2"), "big.weight", "-o", str(out),
            "--chunk-size", str(64 << 10),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, preexec_fn=_interruptible,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not (out.exists() and out.stat().st_size >= 512 << 10):
            assert proc.returncode is None and time.monotonic() < deadline, "download did not start"
            await asyncio.sleep(0.01)
        seen = out.stat().st_size
        proc.send_signal(sig)  # by PID: only the process this test started
        _, err = await asyncio.wait_for(proc.communicate(), 30)
        partial = out.stat().st_size
        assert 0 < partial < len(expected), (seen, partial, proc.returncode, err.decode()[-2000:], server.log)
        server.faults.clear()
        code, _, err2 = await acli("get", server.url("/big.pt2"), "big.weight", "-o", out)
        assert code == 0, err2
    assert out.read_bytes() == expected
    return proc.returncode, err.decode()


def test_get_killed_mid_download_then_resumed(tmp_path, big_archive):
    code, _ = run(_interrupt_then_resume(tmp_path, big_archive, signal.SIGKILL), timeout=120)
    assert code == -signal.SIGKILL


def test_get_interrupted_by_ctrl_c_exits_130_then_resumes(tmp_path, big_archive):
    code, err = run(_interrupt_then_resume(tmp_path, big_archive, signal.SIGINT), timeout=120)
    assert code == 130
    one_line_error(err, "pt2serve: interrupted")


# -- remote locations --------------------------------------------------------------------------------


async def test_http_location(tmp_path):
    location = ARCHIVES / "layouts.pt2"
    async with FaultServer() as server:
        server.put("/models/layouts.pt2", location.read_bytes())
        url = server.url("/models/layouts.pt2")
        code, out, err = await acli("ls", url, "--json")
        assert code == 0, err
        _, tensors = await _reader_tensors(location)
        assert json.loads(out)["tensors"] == [t.to_dict() for t in tensors]
        code, _, err = await acli("get", url, "conv.weight", "-o", tmp_path / "conv.bin")
        assert code == 0, err
        code, _, err = await acli("ls", server.url("/missing.pt2"))
        assert code == 1
        one_line_error(err, "pt2serve: SourceError:")
    assert (tmp_path / "conv.bin").read_bytes() == await _reader_bytes(location, "conv.weight")


def test_s3_location(tmp_path, seaweed_s3):
    location = ARCHIVES / "layouts.pt2"
    seaweed_s3.upload(seaweed_s3.private_bucket, "cli/layouts.pt2", location)
    uri = f"s3://{seaweed_s3.private_bucket}/cli/layouts.pt2"
    env = {
        "AWS_ACCESS_KEY_ID": seaweed_s3.access_key,
        "AWS_SECRET_ACCESS_KEY": seaweed_s3.secret_key,
        "AWS_REGION": seaweed_s3.region,
        "AWS_ENDPOINT_URL": seaweed_s3.endpoint,
    }
    listed = cli("ls", uri, env=env)
    assert listed.returncode == 0, listed.stderr
    assert "conv.weight" in listed.stdout
    out = tmp_path / "conv.npy"
    got = cli("get", uri, "conv.weight", "-o", out, "--format", "npy", env=env)
    assert got.returncode == 0, got.stderr
    assert np.load(out).tobytes() == run(_reader_bytes(location, "conv.weight", "contiguous"))
    denied = cli("ls", uri, env={**env, "AWS_SECRET_ACCESS_KEY": "wrong"})
    assert denied.returncode == 1
    one_line_error(denied.stderr, "pt2serve: SourceError:")


# -- installing --------------------------------------------------------------------------------------


def test_fresh_venv_install_runs_ls(tmp_path):
    """`pip install` of the project into a new venv gives a working `pt2serve` with the demo archive.

    Built the way pip builds it for a newcomer (an isolated build environment with the setuptools
    pyproject.toml asks for), so nothing depends on what the base interpreter happens to carry. The
    new venv finds the runtime dependencies in this environment through a .pth file (no downloads);
    the project is built from a copy of the source tree, so the build leaves nothing in the repo."""
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # only what the venv holds
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for package in ("app", "reader"):
        shutil.copytree(REPO / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    build = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", wheels, source]
    built = subprocess.run(build, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=120)
    python = venv / "bin" / "python"
    site_dir = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                              capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    ours = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    (pathlib.Path(site_dir) / "_dependencies.pth").write_text("\n".join(sorted(ours)) + "\n")
    install = [sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps",
               "--no-index", "--ignore-installed", *wheels.glob("*.whl")]  # fmt: skip
    installed = subprocess.run(install, capture_output=True, text=True, timeout=300, env=clean)
    assert installed.returncode == 0, installed.stderr
    where = subprocess.run([python, "-c", "import app.settings as s; print(s.DEMO_ARCHIVE)"],
                           capture_output=True, text=True, cwd=tmp_path, check=True, env=clean)  # fmt: skip
    demo = pathlib.Path(where.stdout.strip())
    assert demo.is_file() and venv in demo.parents, demo  # the installed copy, package data included
    viewer = demo.parent.parent / "viewer"
    for shipped in ("index.html", "app.js", "icon.svg", "vendor/dagre.esm.js", "vendor/dagre.LICENSE"):
        assert (viewer / shipped).is_file(), shipped  # the viewer, its vendored library and license
    listed = subprocess.run([venv / "bin" / "pt2serve", "ls", demo], capture_output=True, text=True,
                            cwd=tmp_path, timeout=TIMEOUT, env=clean)  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[0].split() == ["name", "kind", "dtype", "shape", "bytes"]
    assert len(listed.stdout.splitlines()) > 1


def _tensor_span(path: pathlib.Path, name: str) -> tuple[int, int, bytes]:
    """Where tensor `name`'s bytes lie in the archive, and its .npy header."""
    from reader.formats.npy import npy_header

    async def where() -> tuple[int, int, bytes]:
        async with reader.open_archive(path) as ar:
            start, end = await ar.tensor(name).archive_span()
            return start, end, npy_header(ar.layout(name))

    return run(where())


@pytest.mark.parametrize("fmt", ["raw", "npy"])
def test_get_of_a_corrupt_tensor_leaves_none_of_its_bytes_to_resume_from(tmp_path, big_archive, fmt):
    """A whole-entry read that fails its CRC-32 cuts the output back to what it held before the run
    (nothing here), so running the command again cannot resume onto bytes of the corrupt entry and
    complete with them: it fails again."""
    start, _end, _header = _tensor_span(big_archive, "big.weight")
    raw = bytearray(big_archive.read_bytes())
    raw[start + 1000] ^= 0x40  # in the first chunk: written out long before the check fails
    path = tmp_path / "corrupt.pt2"
    path.write_bytes(bytes(raw))
    out = tmp_path / f"out.{fmt}"
    for _ in range(2):
        result = cli("get", path, "big.weight", "-o", out, "--format", fmt, "--no-progress",
                     "--chunk-size", 1 << 20)  # fmt: skip
        assert result.returncode == 1
        one_line_error(result.stderr, "pt2serve: IntegrityError:")
        assert out.read_bytes() == b""


@pytest.mark.parametrize("fmt", ["raw", "npy"])
def test_a_resumed_get_checks_the_tensor_it_resumed_inside(tmp_path, big_archive, fmt):
    """The bytes of a partial output came from an earlier run, the rest from a read of part of the
    entry: neither is covered by a CRC-32 until the resumed run checks the whole tensor's bytes in
    the file. A wrong byte in the partial output fails the run and cuts the tensor off; the next run
    fetches it whole."""
    start, end, header = _tensor_span(big_archive, "big.weight")
    head = header if fmt == "npy" else b""
    full = head + big_archive.read_bytes()[start:end]
    out = tmp_path / f"out.{fmt}"
    partial = bytearray(full[: len(head) + 3_000_000])
    partial[len(head) + 12_345] ^= 0x01
    out.write_bytes(bytes(partial))
    result = cli("get", big_archive, "big.weight", "-o", out, "--format", fmt, "--no-progress")
    assert result.returncode == 1
    assert "has no resume record" in result.stderr  # a partial file written by hand, not by a run
    assert result.stderr.splitlines()[-1].startswith("pt2serve: IntegrityError:"), result.stderr
    assert out.read_bytes() == head
    result = cli("get", big_archive, "big.weight", "-o", out, "--format", fmt, "--no-progress")
    assert result.returncode == 0, result.stderr
    assert out.read_bytes() == full


@pytest.mark.parametrize("name", ["view_a", "view_b"])
@pytest.mark.parametrize("flip", [False, True])
def test_a_resumed_view_is_checked_with_the_rest_of_its_storage(tmp_path, name, flip):
    """A view covers part of its storage's entry ([8, 28) and [28, 88) of 88 bytes): the resumed
    run's check carries the entry's CRC-32 over the archive's bytes outside the view and the file's
    bytes inside it. Right bytes complete; one wrong byte fails and cuts the output back."""
    archive = ARCHIVES / "layouts.pt2"
    full = run(_reader_bytes(archive, name))
    out = tmp_path / "out.raw"
    partial = bytearray(full[:11])
    if flip:
        partial[3] ^= 0x10
    out.write_bytes(bytes(partial))
    result = cli("get", archive, name, "-o", out, "--no-progress")
    if flip:
        assert result.returncode == 1
        assert result.stderr.splitlines()[-1].startswith("pt2serve: IntegrityError:"), result.stderr
        assert out.read_bytes() == b""
    else:
        assert result.returncode == 0, result.stderr
        assert out.read_bytes() == full
