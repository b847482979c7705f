"""GET /tensors/{name}/stats: value statistics for the viewer (issue: browser viewer)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
