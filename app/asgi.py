"""ASGI entry point for servers: `uvicorn app.asgi:app` (settings from PT2SERVE_* variables).

Every server process imports this (`pt2serve serve` and each of its workers), so the
allocator settings for a streaming process are applied here (app/allocator.py)."""

from .allocator import keep_freed_buffers
from .main import create_app

keep_freed_buffers()
app = create_app()
