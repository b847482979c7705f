"""hf:// locations and tokens, without the Hub: each location's resolve URL, malformed ones refused,
the token found where huggingface_hub keeps it (the Hub's own tests: test_hf_source.py)."""

from __future__ import annotations

import pytest

import reader
from reader.sources.hf import hub_token, parse_hf_location
from testing.hub_repos import TOKEN

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("location", "url"),
    [
        ("hf://org/model/model.pt2", "/org/model/resolve/main/model.pt2"),
        ("hf://org/model/sub/dir/model.pt2", "/org/model/resolve/main/sub/dir/model.pt2"),
        ("hf://gpt2/model.pt2", "/gpt2/resolve/main/model.pt2"),
        ("hf://gpt2@main/onnx/model.pt2", "/gpt2/resolve/main/onnx/model.pt2"),
        ("hf://datasets/org/data@v1.0/x.pt2", "/datasets/org/data/resolve/v1.0/x.pt2"),
        ("hf://spaces/org/app/a b.pt2", "/spaces/org/app/resolve/main/a%20b.pt2"),
        ("hf://org/model@refs%2Fpr%2F1/model.pt2", "/org/model/resolve/refs%2Fpr%2F1/model.pt2"),
        ("hf://org/model@refs/pr/1/model.pt2", "/org/model/resolve/refs%2Fpr%2F1/model.pt2"),
        ("hf://org/model@refs/convert/parquet/x.pt2", "/org/model/resolve/refs%2Fconvert%2Fparquet/x.pt2"),
        ("hf://org/model@refs/pr/12x/y.pt2", "/org/model/resolve/refs/pr/12x/y.pt2"),  # revision "refs"
        ("HF://org/model/model.pt2", "/org/model/resolve/main/model.pt2"),
    ],
)
def test_locations_map_to_the_hubs_resolve_urls(location: str, url: str) -> None:
    assert parse_hf_location(location).url("https://hub.example") == "https://hub.example" + url


@pytest.mark.parametrize(
    "location",
    ["hf://", "hf://org", "hf://datasets/org/model@main", "hf://org/model@main", "hf://org/model@/x.pt2", "hf://a/b/c/",
     "hf://org/../x.pt2", "hf://org--x/model/x.pt2", "hf://or g/model/x.pt2", "hf://datasets/org",
     "hf://org/model/x.pt2?download=1", "hf:///org/model/x.pt2", "hf://org/model@../x.pt2",
     "hf://org/model@refs/pr/1"],
)  # fmt: skip
async def test_a_malformed_location_is_a_location_error(location: str) -> None:
    with pytest.raises(reader.LocationError, match="hf://"):
        await reader.open_archive(location)


@pytest.mark.parametrize("where", ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HOME", "HF_TOKEN_PATH", "XDG"])
def test_the_token_comes_from_where_huggingface_hub_keeps_it(tmp_path, where: str) -> None:
    if where in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        environ = {where: f" {TOKEN}\n"}
    elif where == "HF_HOME":
        (tmp_path / "token").write_text(TOKEN + "\n")
        environ = {"HF_HOME": str(tmp_path)}
    elif where == "HF_TOKEN_PATH":
        (tmp_path / "elsewhere").write_text(TOKEN)
        environ = {"HF_TOKEN_PATH": str(tmp_path / "elsewhere"), "HF_HOME": str(tmp_path / "nothing")}
    else:
        (tmp_path / "huggingface").mkdir()
        (tmp_path / "huggingface" / "token").write_text(TOKEN)
        environ = {"XDG_CACHE_HOME": str(tmp_path)}
    assert hub_token(environ) == TOKEN
    assert hub_token({**environ, "HF_TOKEN": "from-env"}) == "from-env"  # the environment wins
    assert hub_token({"HF_HOME": str(tmp_path / "empty")}) is None
