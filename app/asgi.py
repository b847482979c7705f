"""ASGI entry point for servers: `uvicorn app.asgi:app` (settings from PT2SERVE_* variables)."""

from .main import create_app

app = create_app()
