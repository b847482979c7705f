"""A clean machine for the S3 credential tests (the fixture aws_env): no AWS_* variables, empty config and
credentials files, no instance metadata."""

from __future__ import annotations

import os
import pathlib

import pytest


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> pathlib.Path:
    """No AWS_* variables, empty config and credentials files, no instance metadata: a clean machine."""
    for name in list(os.environ):
        if name.startswith("AWS_") or name == "PT2SERVE_S3_ENDPOINT":
            monkeypatch.delenv(name)
    for name in ("config", "credentials"):
        (tmp_path / name).write_text("")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return tmp_path
