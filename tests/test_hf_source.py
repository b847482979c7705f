"""hf:// against the Hub's URL layout on loopback (testing/fakehub.py: nginx as the Hub, answering large
files with 302 to a signed URL on a second nginx as its CDN), found through HF_ENDPOINT.

The nginx logs say who got the token (the Hub, never the CDN) and which revision each request named
(a moving `main` pinned to the commit of the first answer)."""

from __future__ import annotations

import pytest

import reader
from testing.cli import acli
from testing.fakehub import FakeHub
from testing.hub_repos import C1, C2, CHECKPOINT, TOKEN, repos, weights

pytestmark = pytest.mark.emulator


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with FakeHub(repos(tmp_path_factory.mktemp("hub"))) as running:
        yield running


@pytest.fixture(autouse=True)
def hub_environment(monkeypatch, tmp_path):
    """No token from the machine running the tests: only what a test sets."""
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))


@pytest.fixture
def endpoint(hub, monkeypatch) -> FakeHub:
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    hub.hub.take_log()
    hub.cdn.take_log()
    return hub


async def _check_weights(location: str, seed: int) -> None:
    async with reader.open_archive(location, tail_size=4096) as ar:
        for name, data in weights(seed).items():
            assert await ar.read(name) == data
            assert b"".join([bytes(chunk) async for chunk in ar.tensor(name).chunks()]) == data


# -- locations -----------------------------------------------------------------------------------


async def test_pt2serve_exits_2_on_a_malformed_location() -> None:
    code, _, err = await acli("ls", "hf://org/model@main")
    assert code == 2 and "repo_id" in err and len(err.strip().splitlines()) == 1


# -- tokens ----------------------------------------------------------------------------------------


# -- reads through the Hub and its CDN -----------------------------------------------------------------


async def test_the_token_reaches_the_hub_only_and_reads_go_to_the_cdn(endpoint, monkeypatch) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    await _check_weights("hf://org/model/model.pt2", 1)
    hub_log, cdn_log = endpoint.hub.take_log(), endpoint.cdn.take_log()
    assert [(r["status"], r["uri"], r["auth"]) for r in hub_log] == [
        (302, "/org/model/resolve/main/model.pt2", True)
    ]
    assert len(cdn_log) > 2 and not any(r["auth"] for r in cdn_log)
    assert all(r["uri"].startswith(f"/org/model/{C1}/model.pt2?sig=") and r["status"] == 206 for r in cdn_log)


async def test_a_file_the_hub_serves_itself_is_read_at_the_pinned_commit(endpoint, monkeypatch) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    await _check_weights("hf://org/model/direct.pt2", 1)
    hub_log = endpoint.hub.take_log()
    assert hub_log[0]["uri"] == "/org/model/resolve/main/direct.pt2"
    later = hub_log[1:]
    assert later and all(r["uri"] == f"/org/model/resolve/{C1}/direct.pt2" and r["auth"] for r in later)
    assert not endpoint.cdn.take_log()


@pytest.mark.parametrize(
    ("location", "asked"),
    [
        ("hf://org/model@refs%2Fpr%2F1/model.pt2", "refs%2Fpr%2F1"),
        ("hf://org/model@refs/pr/1/model.pt2", "refs%2Fpr%2F1"),
        (f"hf://org/model@{C2}/model.pt2", C2),
    ],
)
async def test_a_revision_reads_its_commit(endpoint, location: str, asked: str) -> None:
    await _check_weights(location, 2)
    assert [r["uri"] for r in endpoint.hub.take_log()] == [f"/org/model/resolve/{asked}/model.pt2"]
    assert all(f"/{C2}/" in r["uri"] and not r["auth"] for r in endpoint.cdn.take_log())


async def test_datasets_resolve_under_their_prefix(endpoint) -> None:
    await _check_weights("hf://datasets/org/data/sub/dir/model.pt2", 2)
    assert endpoint.hub.take_log()[0]["uri"] == "/datasets/org/data/resolve/main/sub/dir/model.pt2"


async def test_main_stays_pinned_when_it_moves_and_the_signature_expires(tmp_path, monkeypatch) -> None:
    with FakeHub(repos(tmp_path)) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        async with reader.open_archive("hf://org/model/model.pt2", tail_size=4096) as ar:
            assert await ar.revalidate()
            hub.rotate({("org/model", "main"): C2})  # main moves on; URLs signed before now answer 403
            assert await ar.read("big") == weights(1)["big"]  # still the commit opened
            assert not await ar.revalidate()  # main names other bytes now: the service would reopen
        uris = [(r["method"], r["uri"]) for r in hub.hub.take_log()]
        main, pinned = "/org/model/resolve/main/model.pt2", f"/org/model/resolve/{C1}/model.pt2"
        assert uris == [("GET", main), ("HEAD", main), ("GET", pinned), ("HEAD", main)]
        assert [r["status"] for r in hub.cdn.take_log() if r["method"] == "GET"][-2:] == [403, 206]
        await _check_weights("hf://org/model/model.pt2", 2)  # a new open reads the new main


@pytest.mark.parametrize("where", ["HF_TOKEN", "token file"])
async def test_a_gated_repo_reads_with_the_token(endpoint, monkeypatch, tmp_path, where: str) -> None:
    if where == "HF_TOKEN":
        monkeypatch.setenv("HF_TOKEN", TOKEN)
    else:
        (tmp_path / "hf-home").mkdir()
        (tmp_path / "hf-home" / "token").write_text(TOKEN + "\n")
    await _check_weights("hf://org/gated/model.pt2", 1)
    assert all(r["auth"] for r in endpoint.hub.take_log())
    assert not any(r["auth"] for r in endpoint.cdn.take_log())


@pytest.mark.parametrize(
    ("location", "token", "says"),
    [
        ("hf://org/gated/model.pt2", None, "org/gated is gated: it needs a token"),
        ("hf://org/gated/model.pt2", "hf_wrong", "gated and this token has no access"),
        ("hf://org/nothing/model.pt2", None, "org/nothing not found, or private: private repos need a token"),
        ("hf://org/model@v9/model.pt2", None, "revision 'v9' not found in org/model"),
        ("hf://org/model/missing.pt2", None, "file 'missing.pt2' not found in org/model at revision 'main'"),
    ],
)  # fmt: skip
async def test_the_hubs_refusals_say_what_is_missing(
    endpoint, monkeypatch, tmp_path, location, token, says
) -> None:
    if token:
        monkeypatch.setenv("HF_TOKEN", token)
    with pytest.raises(reader.SourceError) as caught:
        await reader.open_archive(location)
    message = str(caught.value)
    assert says in message and "hf_wrong" not in message
    if "needs a token" in says or "need a token" in says:  # where a token was looked for
        assert f"HF_TOKEN, HUGGING_FACE_HUB_TOKEN or {tmp_path / 'hf-home' / 'token'}" in message


async def test_a_checkpoint_on_the_hub_reads_as_a_local_one(endpoint, monkeypatch) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    async with (
        reader.open_archive(CHECKPOINT) as local,
        reader.open_archive("hf://org/gated/pytorch_model.bin", tail_size=4096) as remote,
    ):
        assert [t.to_dict() for t in remote.tensors()] == [t.to_dict() for t in local.tensors()]
        for info in local.tensors():
            if info.readable:
                assert await remote.read(info.name) == await local.read(info.name)


async def test_pt2serve_ls_reads_from_the_hub(endpoint) -> None:
    code, out, err = await acli(
        "ls", "hf://org/model@refs%2Fpr%2F1/model.pt2", env={"HF_ENDPOINT": endpoint.endpoint}
    )
    assert code == 0, err
    assert "small" in out and "big" in out


async def test_the_scheme_is_read_in_any_case(endpoint) -> None:
    await _check_weights("HF://org/model/model.pt2", 1)
    assert endpoint.hub.take_log()[0]["uri"] == "/org/model/resolve/main/model.pt2"
