"""Models: shapes at the paper's image sizes, W's shape, non-negative Y, functional_call and vmap."""

from __future__ import annotations

import pytest
import torch
from torch.func import functional_call, stack_module_state, vmap

from fedbalance.methods.models import LAST_LAYER, FedModel, available_models, build_model

# name -> (in_channels, num_classes, image_size, s, batch)
PAPER = {
    "lenet5": (1, 10, (28, 28), 84, 4),
    "cnn7": (3, 10, (32, 32), 128, 4),
    "resnet18": (1, 7, (48, 48), 512, 2),
    "resnet50": (1, 26, (28, 28), 2048, 2),
}


@pytest.fixture(scope="module")
def models() -> dict[str, FedModel]:
    torch.manual_seed(0)
    return {name: build_model(name, c, q, size).eval() for name, (c, q, size, _, _) in PAPER.items()}


def _input(name: str, seed: int = 1) -> torch.Tensor:
    c, _, size, _, batch = PAPER[name]
    return torch.rand(batch, c, *size, generator=torch.Generator().manual_seed(seed))


def test_available_models() -> None:
    assert available_models() == ["lenet5", "cnn7", "resnet18", "resnet50"]
    with pytest.raises(ValueError, match="vgg"):
        build_model("vgg", 1, 10)


@pytest.mark.parametrize("name", list(PAPER))
def test_shapes_features_and_classifier(models: dict[str, FedModel], name: str) -> None:
    model = models[name]
    _, q, _, s, batch = PAPER[name]
    x = _input(name)
    with torch.no_grad():
        y = model.features(x)
        z = model(x)
    assert y.shape == (batch, s)
    assert z.shape == (batch, q)
    assert bool((y >= 0).all()) and bool((y > 0).any())
    w = getattr(model, LAST_LAYER).weight
    assert isinstance(getattr(model, LAST_LAYER), torch.nn.Linear)
    assert w.shape == (q, s)
    torch.testing.assert_close(z, y @ w.T + model.classifier.bias)


@pytest.mark.parametrize("name", list(PAPER))
def test_state_dict_has_classifier_once(models: dict[str, FedModel], name: str) -> None:
    keys = list(models[name].state_dict().keys())
    assert len(keys) == len(set(keys))
    assert "classifier.weight" in keys and "classifier.bias" in keys
    assert not any(k.endswith("fc.weight") for k in keys)


def test_lenet5_parameter_count() -> None:
    conv1 = 1 * 6 * 5 * 5 + 6
    conv2 = 6 * 16 * 5 * 5 + 16
    fc1 = 16 * 5 * 5 * 120 + 120
    fc2 = 120 * 84 + 84
    cls = 84 * 10 + 10
    model = build_model("lenet5", 1, 10)
    assert sum(p.numel() for p in model.parameters()) == conv1 + conv2 + fc1 + fc2 + cls == 61706


def test_cnn7_layers_and_image_size() -> None:
    model = build_model("cnn7", 3, 10, (32, 32))
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert len(convs) == 4 and len(linears) == 3
    assert model.fc1.in_features == 64 * 8 * 8
    assert build_model("lenet5", 1, 10, (32, 32)).fc1.in_features == 16 * 6 * 6


def test_resnet_small_stem(models: dict[str, FedModel]) -> None:
    body = models["resnet18"].body
    assert body.conv1.kernel_size == (3, 3) and body.conv1.stride == (1, 1) and body.conv1.in_channels == 1
    assert isinstance(body.maxpool, torch.nn.Identity) and isinstance(body.fc, torch.nn.Identity)


@pytest.mark.parametrize("name", list(PAPER))
def test_functional_call_matches_forward(models: dict[str, FedModel], name: str) -> None:
    model = models[name]
    x = _input(name)
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    with torch.no_grad():
        torch.testing.assert_close(functional_call(model, state, (x,)), model(x))


@pytest.mark.parametrize("name", ["lenet5", "resnet18"])
def test_vmap_over_stacked_params(name: str) -> None:
    c, q, size, _, _ = PAPER[name]
    torch.manual_seed(2)
    copies = [build_model(name, c, q, size).eval() for _ in range(2)]
    params, buffers = stack_module_state(copies)
    x = _input(name)
    base = copies[0]

    def run(p: dict[str, torch.Tensor], b: dict[str, torch.Tensor], xb: torch.Tensor) -> torch.Tensor:
        return functional_call(base, {**p, **b}, (xb,))

    with torch.no_grad():
        out = vmap(run, in_dims=(0, 0, None))(params, buffers, x)
        expected = torch.stack([m(x) for m in copies])
    assert not torch.allclose(expected[0], expected[1])
    torch.testing.assert_close(out, expected)
