"""az:// and Blob URLs without Azurite: which plain URLs take the Blob path, malformed locations, a
missing extra, missing credentials (against Azurite: test_azure_source.py)."""

from __future__ import annotations

import sys

import pytest

import reader
from reader.sources.azure import parse_az_location
from reader.sources.blob import is_blob_url
from testing.azurite import ACCOUNT, ACCOUNT_KEY

CONTAINER = "models"

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("module", "environment"),
    [("azure.storage.blob", {"AZURE_STORAGE_ACCOUNT_KEY": ACCOUNT_KEY}), ("azure.identity", {})],
)
async def test_a_missing_extra_says_which_pip_install(module: str, environment: dict, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # what `import` sees when the package is absent
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", ACCOUNT)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(reader.SourceError) as missing:
        await reader.open_archive(f"az://{CONTAINER}/x.pt2")
    assert "pip install 'pt2serve[azure]'" in str(missing.value) and "\n" not in str(missing.value)


async def test_missing_credentials_say_what_was_tried() -> None:
    with pytest.raises(reader.SourceError) as missing:
        await reader.open_archive(f"az://{CONTAINER}/archives/layouts.pt2")
    assert "AZURE_STORAGE_CONNECTION_STRING" in str(missing.value)
    assert "AZURE_STORAGE_ACCOUNT_NAME" in str(missing.value)
    assert not isinstance(missing.value, reader.LocationError)


@pytest.mark.parametrize(
    ("url", "blob"),
    [
        ("https://acct.blob.core.windows.net/models/x.pt2", True),
        ("https://acct.z12.blob.storage.azure.net/models/x.pt2?sv=2023-11-03&sig=abc", True),
        ("http://127.0.0.1:10000/devstoreaccount1/models/x.pt2?sv=2023-11-03&sr=b&sig=abc", True),
        ("https://example.com/models/x.pt2", False),
        ("https://bucket.s3.amazonaws.com/x.pt2?X-Amz-Signature=abc", False),
    ],
)
def test_which_plain_urls_take_the_blob_path(url: str, blob: bool) -> None:
    assert is_blob_url(url) is blob


@pytest.mark.parametrize(
    "location",
    [
        "az://",
        "az://models",
        "az://models/",
        "az://Models/x.pt2",
        "az://a/x.pt2",
        "az://bad--name/x.pt2",
        "az://models/dir/",
        "az://models/x.pt2?sv=2020&sig=abc",
    ],
)
async def test_malformed_locations_are_location_errors(location: str) -> None:
    with pytest.raises(reader.LocationError):
        parse_az_location(location)
    with pytest.raises(reader.LocationError):
        await reader.open_archive(location)
