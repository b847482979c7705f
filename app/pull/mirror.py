"""A directory that holds one archive version's tensors, switched to a new version atomically.

    DIR/current                   symlink -> versions/<version>-<stamp> (the only pointer readers follow)
    DIR/versions/<version>-<stamp>/manifest.json
    DIR/versions/<version>-<stamp>/<model>/<name>   one file per tensor (names percent-encoded)
    DIR/.pull/blobs/<sha256>      downloads verified, not yet part of a switched version
    DIR/.pull/partial/<key>       downloads in progress (resumed where they stopped)

A version directory is never changed once `current` points at it: an update
builds the next one beside it (hard links for tensors it already has), then
replaces the `current` symlink with one rename. A reader that opens files through
`current` sees the old complete set or the new one, and a crash at any moment
leaves `current` on a complete set and the downloads so far in `.pull`, which the
next run reuses. The previous version directory is kept (readers may still be in
it); older ones are removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import time
import urllib.parse
from typing import Any

HASH_BLOCK = 4 << 20


def tensor_file(model: str, name: str) -> str:
    """The relative path of a tensor's file: `<model>/<name>`, both percent-encoded (names hold
    dots and slashes; the file name must be one path segment and never `.` or `..`)."""
    return f"{_segment(model)}/{_segment(name)}"


def _segment(text: str) -> str:
    quoted = urllib.parse.quote(text, safe="")
    if quoted in ("", ".", ".."):
        return "%2E" * len(text) or "%"  # quote never yields a bare "%", so no clash
    return quoted


def file_sha256(path: str) -> str | None:
    """The hex SHA-256 of a file, or None if it cannot be read."""
    hasher = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            while block := handle.read(HASH_BLOCK):
                hasher.update(block)
    except OSError:
        return None
    return hasher.hexdigest()


def fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Mirror:
    """One mirror directory (created if missing)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.root = os.fspath(directory)
        self.versions = os.path.join(self.root, "versions")
        self.work = os.path.join(self.root, ".pull")
        self.blobs = os.path.join(self.work, "blobs")
        self.partials = os.path.join(self.work, "partial")
        for folder in (self.versions, self.blobs, self.partials):
            os.makedirs(folder, exist_ok=True)
        self.pointer = os.path.join(self.root, "current")

    # -- what is there --------------------------------------------------------

    def current_dir(self) -> str | None:
        """The version directory `current` points at, or None before the first pull."""
        try:
            target = os.readlink(self.pointer)
        except FileNotFoundError:
            return None
        return os.path.join(self.root, target)

    def current_manifest(self) -> dict[str, Any] | None:
        folder = self.current_dir()
        if folder is None:
            return None
        try:
            with open(os.path.join(folder, "manifest.json"), "rb") as handle:
                return json.load(handle)
        except (OSError, ValueError):
            return None

    def known_files(self) -> dict[str, str]:
        """sha256 → a file that should hold those bytes (current version, then finished downloads).
        Unverified: callers check with `verified` before using one."""
        found: dict[str, str] = {}
        manifest, folder = self.current_manifest(), self.current_dir()
        if manifest is not None and folder is not None:
            for entry in manifest.get("tensors", []):
                if entry.get("sha256") and entry.get("file"):
                    found.setdefault(entry["sha256"], os.path.join(folder, entry["file"]))
        for name in os.listdir(self.blobs):
            found.setdefault(name, os.path.join(self.blobs, name))
        return found

    @staticmethod
    def verified(path: str, sha256: str, nbytes: int) -> bool:
        """True if the file holds exactly the bytes with that digest (every byte is read)."""
        try:
            if os.path.getsize(path) != nbytes:
                return False
        except OSError:
            return False
        return file_sha256(path) == sha256

    # -- downloads --------------------------------------------------------------

    def partial_path(self, key: str) -> str:
        return os.path.join(self.partials, key)

    def blob_path(self, sha256: str) -> str:
        return os.path.join(self.blobs, sha256)

    def finish_download(self, partial: str, sha256: str) -> str:
        """Move a verified, complete download into the blobs (durably) and return its path."""
        fsync_path(partial)
        blob = self.blob_path(sha256)
        os.replace(partial, blob)
        fsync_path(self.blobs)
        return blob

    # -- switching --------------------------------------------------------------

    def commit(self, manifest: dict[str, Any], sources: dict[str, str]) -> str:
        """Build a version directory from verified files (`sources`: relative file → path to link or
        copy), write the manifest, and point `current` at it. Returns the new directory."""
        stamp = f"{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(3)}"
        name = f"{manifest['version']}-{stamp}"
        building = os.path.join(self.versions, f".building-{name}")
        os.makedirs(building)
        for relative, source in sources.items():
            target = os.path.join(building, relative)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            try:
                os.link(source, target)
            except OSError:  # another file system, or links not supported
                shutil.copyfile(source, target)
                fsync_path(target)
        with open(os.path.join(building, "manifest.json"), "w") as handle:
            json.dump(manifest, handle, indent=1, sort_keys=False)
            handle.flush()
            os.fsync(handle.fileno())
        for folder in {os.path.dirname(os.path.join(building, rel)) for rel in sources} | {building}:
            fsync_path(folder)
        final = os.path.join(self.versions, name)
        os.rename(building, final)
        fsync_path(self.versions)
        previous = self.current_dir()
        link = os.path.join(self.root, f".current-{stamp}")
        os.symlink(os.path.join("versions", name), link)
        os.replace(link, self.pointer)  # the switch: one atomic rename
        fsync_path(self.root)
        self._clean(keep={final, previous})
        return final

    def _clean(self, keep: set[str | None]) -> None:
        """Drop finished downloads (now linked), leftovers of crashed builds, and versions older
        than the previous one."""
        shutil.rmtree(self.blobs, ignore_errors=True)
        os.makedirs(self.blobs, exist_ok=True)
        for name in os.listdir(self.versions):
            path = os.path.join(self.versions, name)
            if path not in keep:
                shutil.rmtree(path, ignore_errors=True)
        for name in os.listdir(self.root):
            if name.startswith(".current-"):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(self.root, name))
