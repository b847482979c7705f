"""The old path of `reader.entries.ranges`, kept only while reader/sources/base.py imports it."""

from ..entries.ranges import coalesce

__all__ = ["coalesce"]
