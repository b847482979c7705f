"""Only `ranges`, for reader/sources/base.py until it imports `reader.entries.ranges`; then delete."""
