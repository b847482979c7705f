"""testing/provision.py: installs run once per machine under a lock every process honours.

Processes of their own stand in for pytest-xdist's workers; a harmless command stands in for apt-get,
recording when it ran and failing if another copy of it is inside at the same time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from testing import provision
from testing.paths import REPO

pytestmark = pytest.mark.emulator

# the stand-in install: refuses to start while another is inside, records its time inside
STAND_IN = textwrap.dedent(
    """
    import json, os, sys, time
    folder, name = sys.argv[1], sys.argv[2]
    inside = os.path.join(folder, "inside")
    try:
        os.close(os.open(inside, os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        sys.exit("another install is inside")
    start = time.time()
    time.sleep(0.5)
    end = time.time()
    os.remove(inside)
    with open(os.path.join(folder, name + ".json"), "w") as f:
        json.dump([start, end], f)
    """
)

# a worker: waits for the go, then asks for its own package under the shared lock
WORKER = textwrap.dedent(
    """
    import os, pathlib, sys, time
    from testing import provision
    folder, name, stand_in = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    while not (folder / "go").exists():
        time.sleep(0.01)
    provision.install_once(
        "stand-in", [sys.executable, stand_in, str(folder), name],
        installed=(folder / (name + ".json")).exists, timeout=float(sys.argv[4]),
    )
    """
)


def _env(tmp_path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "PT2SERVE_TEST_CACHE": str(tmp_path / "cache")}


def _workers(tmp_path, names: list[str], timeout: float = 60) -> list[subprocess.Popen]:
    stand_in = tmp_path / "stand_in.py"
    stand_in.write_text(STAND_IN)
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    return [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(tmp_path), name, str(stand_in), str(timeout)],
            env=_env(tmp_path),
            **pipes,
        )
        for name in names
    ]


def test_two_workers_asking_for_different_packages_both_get_them_one_at_a_time(tmp_path) -> None:
    workers = _workers(tmp_path, ["first", "second"])
    (tmp_path / "go").touch()
    for worker in workers:
        _, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err
    spans = sorted(json.loads((tmp_path / f"{name}.json").read_text()) for name in ("first", "second"))
    assert spans[0][1] <= spans[1][0], spans  # never both inside


def test_what_another_worker_installed_meanwhile_is_not_installed_again(tmp_path) -> None:
    workers = _workers(tmp_path, ["same", "same", "same"])
    (tmp_path / "go").touch()
    outputs = []
    for worker in workers:
        out, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err
        outputs.append(out)
    # one install ran; the others found its result once they held the lock
    assert sum("stand-in:" in out for out in outputs) == 1, outputs


def test_a_held_lock_names_its_holder_and_command_after_the_timeout(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(provision, "LOCKS", tmp_path / "cache" / "locks")
    with provision.machine_lock("stand-in", command="apt-get install -y chromium"):
        (worker,) = _workers(tmp_path, ["late"], timeout=0.5)
        (tmp_path / "go").touch()
        _, err = worker.communicate(timeout=60)
    assert worker.returncode != 0
    last = err.strip().splitlines()[-1]
    assert last.startswith("testing.provision.ProvisionError: waited 0.5 s"), err
    assert f"held by PID {os.getpid()} running `apt-get install -y chromium`" in last, err
    assert "stand_in.py" in last and "late" in last  # what the waiting worker came to run
    assert not (tmp_path / "late.json").exists()


def test_a_killed_holder_leaves_the_lock_free(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(provision, "LOCKS", tmp_path / "cache" / "locks")
    hold = (
        "from testing import provision; import time\n"
        "with provision.machine_lock('stand-in', command='sleep'):\n"
        "    print('held', flush=True); time.sleep(600)"
    )
    holder = subprocess.Popen([sys.executable, "-c", hold], env=_env(tmp_path), stdout=subprocess.PIPE)
    assert holder.stdout is not None
    try:
        assert holder.stdout.readline().strip() == b"held"
        with (
            pytest.raises(provision.ProvisionError, match=f"held by PID {holder.pid} running `sleep`"),
            provision.machine_lock("stand-in", command="mine", timeout=0.2),
        ):
            pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
    started = time.monotonic()
    with provision.machine_lock("stand-in", command="mine", timeout=30):
        assert time.monotonic() - started < 30


def test_a_venv_is_complete_only_after_every_step(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(provision, "CACHE", tmp_path / "cache")
    monkeypatch.setattr(provision, "LOCKS", tmp_path / "cache" / "locks")
    with pytest.raises(provision.ProvisionError, match="pip"):
        provision.ensure_venv("tool", [str(tmp_path / "no-such-project")])
    venv = tmp_path / "cache" / "venvs" / "tool"
    assert not (venv / provision.COMPLETE).exists()  # a failed install is not taken for a made venv

    # pip is already in a new venv: nothing to download
    assert provision.ensure_venv("tool", ["pip"]) == venv
    made = (venv / provision.COMPLETE).stat().st_mtime_ns
    assert provision.ensure_venv("tool", ["pip"]) == venv
    assert (venv / provision.COMPLETE).stat().st_mtime_ns == made  # made once
    tool = provision.ensure_venv_tool("pip", "pip")
    assert tool == str(tmp_path / "cache" / "venvs" / "pip" / "bin" / "pip")
