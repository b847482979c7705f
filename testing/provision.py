"""What the tests drive for real, installed on first use when a fresh machine lacks it.

The README's test command is the whole setup a newcomer runs: the tests provision their own
system packages (apt-get, as root), npm packages and tool venvs (into a cache folder) and images
(testing/podman.py), so nothing skips silently on a fresh machine. Where provisioning is impossible
(no apt-get, not root, no registry), the error says the command to run by hand.

pytest-xdist's workers are processes, and two test runs may share a machine, so every install runs
under a machine-wide lock (`machine_lock`: flock on a file under CACHE/locks, which names its
holder's PID and command) and checks again, once it holds the lock, whether another process
installed the thing meanwhile. apt-get waits for dpkg's own lock too (`DPkg::Lock::Timeout`)
instead of failing with exit 100 while something else installs.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

CACHE = pathlib.Path(os.environ.get("PT2SERVE_TEST_CACHE", pathlib.Path.home() / ".cache" / "pt2serve-tests"))
NPM_PREFIX = CACHE  # the npm packages live in NPM_PREFIX/npm, the tool venvs in CACHE/venvs
LOCKS = CACHE / "locks"
# how long a process waits for another's install (Chromium or a venv of vLLM take minutes)
LOCK_TIMEOUT = float(os.environ.get("PT2SERVE_PROVISION_TIMEOUT", "1800"))
# how long apt-get waits for dpkg's lock held by another apt-get (this machine's or ours)
DPKG_LOCK_TIMEOUT = 600
APT_LOCK = "apt"  # one lock for every apt-get: dpkg installs one thing at a time anyway
_apt_updated = False


class ProvisionError(RuntimeError):
    """A tool the tests need is missing and could not be installed here."""


def which(*names: str) -> str | None:
    """The first of `names` found on PATH or in the system folders PATH may lack."""
    for name in names:
        found = shutil.which(name) or next(
            (
                str(p)
                for d in ("/usr/sbin", "/usr/bin", "/sbin")
                if os.access(p := pathlib.Path(d, name), os.X_OK)
            ),
            None,
        )
        if found:
            return found
    return None


# -- the machine-wide lock -------------------------------------------------------------------------


def _holder(path: pathlib.Path) -> str:
    """Who holds the lock file at `path`, as its holder wrote it."""
    try:
        holder = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        holder = {}
    if not holder:
        return "a process that has not yet written its PID"
    return f"PID {holder.get('pid')} running `{holder.get('command')}`"


@contextlib.contextmanager
def machine_lock(resource: str, *, command: str, timeout: float = LOCK_TIMEOUT) -> Iterator[None]:
    """Hold the lock of `resource` (one for every process on this machine) while the block runs.

    The lock file says who holds it (PID and `command`); a process that waits longer than `timeout`
    gets a ProvisionError naming that holder and what it waited to do. The kernel drops a dead
    holder's lock, so a killed install never leaves the lock taken."""
    LOCKS.mkdir(parents=True, exist_ok=True)
    path = LOCKS / f"{resource}.lock"
    with open(path, "a+") as file:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise ProvisionError(
                        f"waited {timeout:g} s for the provisioning lock {path}, held by {_holder(path)}, "
                        f"to run `{command}` (PID {os.getpid()})"
                    ) from None
                time.sleep(0.1)
        try:
            file.seek(0)
            file.truncate()
            file.write(json.dumps({"pid": os.getpid(), "command": command}))
            file.flush()
            yield
        finally:
            file.seek(0)
            file.truncate()
            file.flush()
            fcntl.flock(file, fcntl.LOCK_UN)


def install_once(
    resource: str,
    command: Sequence[str],
    *,
    installed: Callable[[], bool],
    timeout: float = LOCK_TIMEOUT,
    env: Mapping[str, str] | None = None,
) -> None:
    """Run `command` unless `installed()`, under `resource`'s machine-wide lock, and check `installed()`
    again once the lock is held (another process may have installed it meanwhile). ProvisionError
    with the command's output when it fails."""
    if installed():
        return
    shown = " ".join(command)
    with machine_lock(resource, command=shown, timeout=timeout):
        if installed():
            return
        print(f"{resource}: {shown} ...", flush=True)
        _run(command, env=env)


def _run(command: Sequence[str], *, env: Mapping[str, str] | None = None) -> None:
    result = subprocess.run(
        list(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=None if env is None else {**os.environ, **env},
    )  # fmt: skip
    if result.returncode != 0:
        raise ProvisionError(f"`{' '.join(command)}` exited {result.returncode}:\n{result.stdout[-4000:]}")


# -- apt, npm, venvs -------------------------------------------------------------------------------


def apt_get(*args: str) -> list[str]:
    """An apt-get command line that waits for dpkg's lock instead of failing (exit 100) on it."""
    return ["apt-get", "-o", f"DPkg::Lock::Timeout={DPKG_LOCK_TIMEOUT}", *args]


def ensure_apt(binary: str | tuple[str, ...], package: str) -> str:
    """The path of `binary` (or the first of several names), apt-get installing `package` if missing."""
    names = (binary,) if isinstance(binary, str) else binary
    found = which(*names)
    if found:
        return found
    command = f"apt-get install -y {package}"
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise ProvisionError(f"{names[0]} is missing and cannot be installed here: run `{command}` as root")
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    with machine_lock(APT_LOCK, command=command):
        if which(*names):
            return which(*names)  # type: ignore[return-value]
        global _apt_updated
        print(f"{names[0]} not found: {command} ...", flush=True)
        if not _apt_updated:
            _run(apt_get("update", "-qq"), env=env)
            _apt_updated = True
        _run(apt_get("install", "-y", "-qq", package), env=env)
    found = which(*names)
    if found is None:
        raise ProvisionError(f"{names[0]} is still missing after `{command}`")
    return found


def ensure_npm(package: str, binary: str) -> str:
    """The path of an npm package's `binary`, installed under NPM_PREFIX/npm on first use (Node and npm
    come from Debian when missing)."""
    ensure_apt("node", "nodejs")
    npm = ensure_apt("npm", "npm")
    prefix = NPM_PREFIX / "npm"
    target = prefix / "node_modules" / ".bin" / binary
    prefix.mkdir(parents=True, exist_ok=True)
    command = [npm, "install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix", str(prefix)]
    command.append(package)
    install_once("npm", command, installed=target.exists)
    if not target.exists():
        raise ProvisionError(f"{binary} is still missing after `npm install {package}`")
    return str(target)


def ensure_chromium() -> str:
    """Debian's Chromium (Playwright drives it; `playwright install` cannot download browsers here)."""
    return ensure_apt("chromium", "chromium")


def ensure_nginx() -> str:
    """Debian's `nginx` (bookworm's nginx-light is only a transitional package for it): built with
    the auth_request and slice modules deploy/nginx.conf uses."""
    return ensure_apt("nginx", "nginx")


COMPLETE = ".pt2serve-complete"  # written into a venv last: what it was made with


def ensure_venv(name: str, requirements: list[str], uninstall: Sequence[str] = ()) -> pathlib.Path:
    """A venv of its own at CACHE/venvs/NAME with `requirements` pip installed (then `uninstall`
    removed), made once per machine under a lock: for tools whose pinned dependencies must not meet
    the project's. It counts as made only once every step succeeded (a marker written last, naming
    the requirements: other requirements make it again)."""
    venv = CACHE / "venvs" / name
    marker = venv / COMPLETE
    recipe = json.dumps({"requirements": list(requirements), "uninstall": list(uninstall)})

    def made() -> bool:
        return marker.exists() and marker.read_text() == recipe

    if made():
        return venv
    python = str(venv / "bin" / "python")
    quiet = ["--quiet", "--disable-pip-version-check"]
    with machine_lock(f"venv-{name}", command=f"pip install {' '.join(requirements)} into {venv}"):
        if made():
            return venv
        print(f"venv {name}: pip install {' '.join(requirements)} into {venv} ...", flush=True)
        _run([sys.executable, "-m", "venv", "--clear", str(venv)])
        _run([python, "-m", "pip", "install", *quiet, *requirements])
        if uninstall:
            _run([python, "-m", "pip", "uninstall", "--yes", *quiet, *uninstall])
        marker.write_text(recipe)
    return venv


def ensure_venv_tool(package: str, binary: str) -> str:
    """The path of a PyPI tool's `binary`, pip installed into a venv of its own on first use."""
    name = package.split("[")[0].split("=")[0].split("<")[0].split(">")[0]
    target = ensure_venv(name, [package]) / "bin" / binary
    if not target.exists():
        raise ProvisionError(f"{binary} is still missing after `pip install {package}` into {target.parent}")
    return str(target)
