"""The parts of vLLM's `pt2serve` load format that need no vLLM: what `--model-loader-extra-config`
may say, which files of a model folder are the weights, the tensors handed over as they land (the
names and values `reader.torch.load` gives), and the names of the parameters nothing filled.
(tests/test_vllm_load_format.py runs the whole format in vLLM.)"""

from __future__ import annotations

import json
import pathlib
import threading

import pytest
import torch

import reader
import reader.torch
from reader.integrations.vllm.ranks import owners
from reader.integrations.vllm.settings import LoaderSettings, folder_weights
from reader.integrations.vllm.weights import WeightsNotLoaded, iter_weights, missing_parameters

pytestmark = pytest.mark.unit


def _state() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    embedding = torch.randn(16, 8)
    return {
        "wte.weight": embedding,
        "lm_head.weight": embedding,  # tied
        "h.0.weight": torch.randn(8, 8),
        "h.0.bias": torch.randn(8),
        "h.1.weight": torch.randn(8, 8).t(),  # a view with strides of its own
    }


def test_extra_config_becomes_open_options() -> None:
    settings = LoaderSettings.from_extra_config(
        {
            "location": "s3://bucket/model.pt2",
            "cache_dir": "/tmp/cache",
            "offline": False,
            "verify": True,
            "s3": {"endpoint": "http://127.0.0.1:9000", "addressing_style": "path"},
            "http": {"parallel_parts": 4},
        }
    )
    options = settings.open_options()
    assert settings.locations("/no/such/folder") == ["s3://bucket/model.pt2"]
    assert settings.verify is True
    assert options.cache_dir == "/tmp/cache" and options.offline is False
    assert options.s3_settings == reader.sources.S3Settings(
        endpoint="http://127.0.0.1:9000", addressing_style="path"
    )
    assert options.http_options is not None and options.http_options.parallel_parts == 4
    assert LoaderSettings.from_extra_config({}) == LoaderSettings()
    assert LoaderSettings.from_extra_config(None) == LoaderSettings()


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"locaton": "s3://b/m.pt2"}, "locaton"),  # a typo must not fall back to the model folder
        ({"location": 3}, "location"),
        ({"offline": "yes"}, "offline"),
        ({"s3": {"endpoint_url": "http://x"}}, "endpoint_url"),
        ({"http": {"parts": 2}}, "parts"),
        ({"ranks": "each-reads-half"}, "ranks"),
    ],
)
def test_bad_extra_config_is_a_value_error_naming_the_key(extra: dict, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        LoaderSettings.from_extra_config(extra)


def test_tensor_parallel_ranks_read_once_unless_the_config_says_each_reads_all() -> None:
    assert LoaderSettings.from_extra_config({}).ranks == "read-once"
    assert LoaderSettings.from_extra_config({"ranks": "each-reads-all"}).ranks == "each-reads-all"


def test_the_ranks_share_the_storages_bytes_about_equally_and_agree_on_who_reads_what() -> None:
    storages = [(f"data/{place}", nbytes) for place, nbytes in enumerate([400, 100, 300, 200, 50, 50, 0])]
    chosen = owners(storages, 2)
    assert chosen == owners(list(reversed(storages)), 2)  # every rank's plan, whatever its order
    held = [sum(nbytes for key, nbytes in storages if chosen[key] == rank) for rank in (0, 1)]
    assert held == [550, 550]
    assert set(owners(storages, 8).values()) == set(range(7))  # more ranks than storages: some read none


def _touch(folder: pathlib.Path, *names: str) -> pathlib.Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(b"")
    return folder


def test_a_folder_s_weights_in_order_of_preference(tmp_path: pathlib.Path) -> None:
    both = _touch(tmp_path / "both", "config.json", "model.pt2", "pytorch_model.bin", "model.safetensors")
    assert folder_weights(both) == [str(both / "model.pt2")]
    sharded = _touch(
        tmp_path / "sharded",
        "pytorch_model.bin.index.json",
        "pytorch_model-00001-of-00002.bin",
        "pytorch_model-00002-of-00002.bin",
        "model.safetensors.index.json",
    )
    assert folder_weights(sharded) == [str(sharded / "pytorch_model.bin.index.json")]
    bins = _touch(tmp_path / "bins", "a.bin", "b.bin", "training_args.bin", "optimizer.bin")
    assert folder_weights(bins) == [str(bins / "a.bin"), str(bins / "b.bin")]
    assert LoaderSettings().locations(str(bins)) == [str(bins / "a.bin"), str(bins / "b.bin")]


def test_a_folder_without_weights_or_with_two_pt2_says_to_name_a_location(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match=r"no \.pt2, \*\.index\.json or \*\.bin weights"):
        folder_weights(_touch(tmp_path / "none", "config.json", "model.safetensors", "training_args.bin"))
    with pytest.raises(ValueError, match="several"):
        folder_weights(_touch(tmp_path / "two", "a.pt2", "b.pt2"))
    with pytest.raises(ValueError, match="not a local folder"):
        folder_weights("gpt2")  # a Hub repository id


@pytest.fixture
def checkpoint(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "pytorch_model.bin"
    torch.save(_state(), path)
    return path


def test_tensors_come_with_the_checkpoint_s_names_and_values(checkpoint: pathlib.Path) -> None:
    expected = reader.torch.load(checkpoint)
    handed = list(iter_weights([str(checkpoint)]))
    assert sorted(name for name, _ in handed) == sorted(_state())
    for name, tensor in handed:
        assert torch.equal(tensor, expected[name]), name
        assert tensor.stride() == expected[name].stride(), name


def test_a_sharded_checkpoint_and_several_locations(tmp_path: pathlib.Path, checkpoint: pathlib.Path) -> None:
    state = _state()
    shards = {
        "model-00001-of-00002.bin": ["h.0.weight", "h.0.bias"],
        "model-00002-of-00002.bin": ["h.1.weight"],
    }
    for shard, names in shards.items():
        torch.save({name: state[name].clone() for name in names}, tmp_path / shard)
    index = tmp_path / "model.bin.index.json"
    index.write_text(json.dumps({"weight_map": {n: shard for shard, names in shards.items() for n in names}}))

    handed = list(iter_weights([str(index), str(checkpoint)]))

    assert [name for name, _ in handed].count("h.0.weight") == 2
    assert len(handed) == 3 + len(state)
    for name, tensor in handed:
        assert torch.equal(tensor, state[name]), name


def test_a_read_that_fails_raises_in_the_consumer(tmp_path: pathlib.Path, checkpoint: pathlib.Path) -> None:
    with pytest.raises(reader.ReaderError):
        list(iter_weights([str(checkpoint), str(tmp_path / "absent.bin")]))
    assert not _reading_threads()


def test_leaving_early_stops_the_reads(checkpoint: pathlib.Path) -> None:
    weights = iter_weights([str(checkpoint)] * 50)
    next(weights)
    weights.close()
    assert not _reading_threads()


def _reading_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "pt2serve-vllm-weights"]


class _Quantized(torch.nn.Linear):
    quant_method = object()


def test_missing_parameters_are_listed_by_name() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4), _Quantized(4, 4))
    model.register_parameter("empty", torch.nn.Parameter(torch.empty(0)))
    every = {name for name, _ in model.named_parameters()}

    def nothing_exempt(module: torch.nn.Module) -> bool:
        return False

    assert missing_parameters(model, every, exempt=nothing_exempt) == []
    assert missing_parameters(model, every - {"0.weight", "1.bias"}, exempt=nothing_exempt) == [
        "0.weight",
        "1.bias",
    ]
    assert missing_parameters(model, {"0.weight", "0.bias", "1.weight", "1.bias"}, exempt=nothing_exempt) == [
        "2.bias",
        "2.weight",
    ]
    quantized_exempt = missing_parameters(
        model, {"0.bias"}, exempt=lambda module: hasattr(module, "quant_method")
    )
    assert quantized_exempt == ["0.weight", "1.bias", "1.weight"]  # the empty parameter never counts

    error = WeightsNotLoaded(["0.weight", "1.bias"], ["s3://bucket/model.pt2"])
    assert isinstance(error, reader.ReaderError) and isinstance(error, ValueError)
    assert str(error) == "2 parameters of the model are not in s3://bucket/model.pt2: 0.weight, 1.bias"


def test_the_entry_point_names_register_and_importing_it_imports_no_vllm() -> None:
    import importlib
    import sys
    import tomllib

    root = pathlib.Path(__file__).resolve().parent.parent
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    target = project["entry-points"]["vllm.general_plugins"]["pt2serve"]
    module, _, function = target.partition(":")
    assert callable(getattr(importlib.import_module(module), function))
    assert not [name for name in sys.modules if name.split(".")[0] == "vllm"]
