"""What the tests drive for real, installed on first use when a fresh machine lacks it.

The README's test command is the whole setup a newcomer runs: the tests provision their own
system packages (apt-get, as root) and npm packages (into a cache folder), so nothing skips
silently on a fresh machine. Where provisioning is impossible (no apt-get, not root, no
registry), the error says the command to run by hand.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import threading

NPM_PREFIX = pathlib.Path(
    os.environ.get("PT2SERVE_TEST_CACHE", pathlib.Path.home() / ".cache" / "pt2serve-tests")
)
_lock = threading.Lock()
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


def ensure_apt(binary: str | tuple[str, ...], package: str) -> str:
    """The path of `binary` (or the first of several names), apt-get installing `package` if missing."""
    names = (binary,) if isinstance(binary, str) else binary
    with _lock:
        found = which(*names)
        if found:
            return found
        command = f"apt-get install -y {package}"
        if shutil.which("apt-get") is None or os.geteuid() != 0:
            raise ProvisionError(
                f"{names[0]} is missing and cannot be installed here: run `{command}` as root"
            )
        global _apt_updated
        print(f"{names[0]} not found: {command} ...", flush=True)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        if not _apt_updated:
            subprocess.run(["apt-get", "update", "-qq"], check=True, stdout=subprocess.DEVNULL, env=env)
            _apt_updated = True
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", package], check=True, stdout=subprocess.DEVNULL, env=env
        )
        found = which(*names)
        if found is None:
            raise ProvisionError(f"{names[0]} is still missing after `{command}`")
        return found


def ensure_npm(package: str, binary: str) -> str:
    """The path of an npm package's `binary`, installed under NPM_PREFIX on first use (Node and npm
    come from Debian when missing)."""
    ensure_apt("node", "nodejs")
    npm = ensure_apt("npm", "npm")
    target = NPM_PREFIX / "npm" / "node_modules" / ".bin" / binary
    with _lock:
        if target.exists():
            return str(target)
        NPM_PREFIX.joinpath("npm").mkdir(parents=True, exist_ok=True)
        print(f"{binary} not found: npm install {package} ...", flush=True)
        subprocess.run(
            [
                npm,
                "install",
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
                "--prefix",
                str(NPM_PREFIX / "npm"),
                package,
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
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


def ensure_venv_tool(package: str, binary: str) -> str:
    """The path of a PyPI tool's `binary`, pip installed into its own venv under NPM_PREFIX on first use:
    for tools whose pinned dependencies must not meet the project's (checkov pins dozens)."""
    name = package.split("[")[0].split("=")[0].split("<")[0].split(">")[0]
    venv = NPM_PREFIX / "venvs" / name
    target = venv / "bin" / binary
    with _lock:
        if target.exists():
            return str(target)
        print(f"{binary} not found: pip install {package} into {venv} ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             package],
            check=True,
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        if not target.exists():
            raise ProvisionError(f"{binary} is still missing after `pip install {package}` into {venv}")
        return str(target)


def ensure_venv(name: str, requirements: tuple[str, ...], uninstall: tuple[str, ...] = ()) -> pathlib.Path:
    """The python of a venv of its own under NPM_PREFIX, pip installing `requirements` on first use and
    then uninstalling `uninstall` (packages a requirement pulls in that break it here): for tools too big
    or too pinned to meet the project's venv (vLLM). A marker written last says the venv is complete,
    so an interrupted install starts over."""
    venv = NPM_PREFIX / "venvs" / name
    python = venv / "bin" / "python"
    marker = venv / ".provisioned"
    wanted = "\n".join((*requirements, "uninstall:", *uninstall))
    with _lock:
        if marker.exists() and marker.read_text() == wanted:
            return python
        print(f"venv {name} not ready: pip install {' '.join(requirements)} into {venv} ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        pip = [str(python), "-m", "pip", "--quiet", "--disable-pip-version-check"]
        subprocess.run([*pip, "install", *requirements], check=True, stdout=subprocess.DEVNULL)
        if uninstall:
            subprocess.run([*pip, "uninstall", "-y", *uninstall], check=True, stdout=subprocess.DEVNULL)
        marker.write_text(wanted)
        return python
