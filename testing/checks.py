"""Small checks shared by test modules."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from collections.abc import Coroutine
from typing import Any


def run(coro: Coroutine[Any, Any, Any], timeout: float = 30.0) -> Any:
    """Run a coroutine with a hard time bound, so a hang fails instead of blocking the suite."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_field(body: bytes) -> str:
    return f"sha-256=:{base64.b64encode(hashlib.sha256(body).digest()).decode()}:"
