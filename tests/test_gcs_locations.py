"""gs:// locations: malformed ones are LocationErrors before anything is opened (the emulator tests:
test_gcs_source.py)."""

from __future__ import annotations

import pytest

import reader
from testing.gcs import (
    fake_gcs,  # noqa: F401 - session fixture: fake-gcs-server on loopback
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "location",
    ["gs://", "gs:///object", "gs://bucket", "gs://bucket/", "gs://Upper/x.pt2", "gs://ab/x.pt2",
     "gs://bad!name/x.pt2", "gs://-bucket/x.pt2", "gs://bucket/..", "gs://bucket/a\nb"],
)  # fmt: skip
async def test_malformed_locations_are_location_errors(location: str) -> None:
    with pytest.raises(reader.LocationError, match="not a gs://bucket/object location"):
        await reader.open_archive(location)
