"""The paper's four classifiers, each exposing its last linear layer W (Q x s) as ``.classifier``.

Every model is ``forward(x) = classifier(features(x))`` where ``features`` returns the paper's
hidden-layer output Y (shape [N, s], non-negative: it comes after a ReLU or ReLU + average pool),
so the monitor and Theorem 2 apply. The forward passes are functional (no in-place ops on
inputs, no ``.item()``, no data-dependent control flow) so they run under
``torch.func.functional_call`` and ``torch.func.vmap``. No dropout anywhere.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def to_float(x: torch.Tensor) -> torch.Tensor:
    """The models' input: uint8 images [N, C, H, W] -> float32 in [0, 1] (float input as float32)."""
    return x.float().div_(255.0) if x.dtype == torch.uint8 else x.float()


LAST_LAYER = "classifier"


class FedModel(nn.Module):
    """Base class: ``forward(x) = self.classifier(self.features(x))``; ``classifier.weight`` is W."""

    classifier: nn.Linear

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Penultimate activations Y, shape [N, s], non-negative."""
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits Z = W Y + b, shape [N, Q]."""
        return self.classifier(self.features(x))


class LeNet5(FedModel):
    """Classic LeNet-5 with ReLU (MNIST).

    conv5x5(6, padding 2) -> ReLU -> maxpool2 -> conv5x5(16) -> ReLU -> maxpool2 -> flatten
    -> fc120 -> ReLU -> fc84 -> ReLU -> classifier(84 -> Q). The padding of the first conv lets
    28x28 inputs give LeNet's 5x5x16 map; the flatten size follows ``image_size``.
    """

    def __init__(self, in_channels: int, num_classes: int, image_size: tuple[int, int] = (28, 28)) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 6, kernel_size=5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, kernel_size=5)
        h, w = ((d // 2 - 4) // 2 for d in image_size)
        if h < 1 or w < 1:
            raise ValueError(f"image_size {image_size} is too small for LeNet5")
        self.fc1 = nn.Linear(16 * h * w, 120)
        self.fc2 = nn.Linear(120, 84)
        self.classifier = nn.Linear(84, num_classes)
        self.pool = nn.MaxPool2d(2)
        self.relu = nn.ReLU()

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Y = ReLU(fc84(...)), shape [N, 84]."""
        x = self.pool(self.relu(self.conv1(x)))
        x = self.pool(self.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        return self.relu(self.fc2(self.relu(self.fc1(x))))


class CNN7(FedModel):
    """The paper's "7-layer CNN" for CIFAR10: 4 conv + 3 fully connected layers (ours; the paper gives no details).

    conv3x3(32, pad 1) -> ReLU -> conv3x3(32, pad 1) -> ReLU -> maxpool2
    -> conv3x3(64, pad 1) -> ReLU -> conv3x3(64, pad 1) -> ReLU -> maxpool2 -> flatten
    -> fc512 -> ReLU -> fc128 -> ReLU -> classifier(128 -> Q).
    For 32x32 inputs the flatten size is 64 * 8 * 8 = 4096; in general it follows ``image_size``.
    """

    def __init__(self, in_channels: int, num_classes: int, image_size: tuple[int, int] = (32, 32)) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 32, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(32, 32, kernel_size=3, padding=1)
        self.conv3 = nn.Conv2d(32, 64, kernel_size=3, padding=1)
        self.conv4 = nn.Conv2d(64, 64, kernel_size=3, padding=1)
        h, w = (d // 4 for d in image_size)
        if h < 1 or w < 1:
            raise ValueError(f"image_size {image_size} is too small for CNN7")
        self.fc1 = nn.Linear(64 * h * w, 512)
        self.fc2 = nn.Linear(512, 128)
        self.classifier = nn.Linear(128, num_classes)
        self.pool = nn.MaxPool2d(2)
        self.relu = nn.ReLU()

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Y = ReLU(fc128(...)), shape [N, 128]."""
        x = self.pool(self.relu(self.conv2(self.relu(self.conv1(x)))))
        x = self.pool(self.relu(self.conv4(self.relu(self.conv3(x)))))
        x = torch.flatten(x, 1)
        return self.relu(self.fc2(self.relu(self.fc1(x))))


class ResNet(FedModel):
    """torchvision ResNet with a small-image stem (3x3 stride-1 conv1, no max-pool).

    ``body`` is the torchvision network with ``fc`` set to Identity, so ``features`` is everything
    up to and including average pool + flatten; torchvision's ``fc`` is moved to ``classifier``
    (registered once, under that name only).
    """

    def __init__(self, arch: Callable[..., nn.Module], in_channels: int, num_classes: int) -> None:
        super().__init__()
        body = arch(weights=None, num_classes=num_classes)
        body.conv1 = nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
        nn.init.kaiming_normal_(body.conv1.weight, mode="fan_out", nonlinearity="relu")
        body.maxpool = nn.Identity()
        self.classifier = body.fc
        body.fc = nn.Identity()
        self.body = body

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Y = flatten(avgpool(ReLU(...))), shape [N, 512] (resnet18) or [N, 2048] (resnet50)."""
        return self.body(x)


def _lenet5(in_channels: int, num_classes: int, image_size: tuple[int, int]) -> FedModel:
    return LeNet5(in_channels, num_classes, image_size)


def _cnn7(in_channels: int, num_classes: int, image_size: tuple[int, int]) -> FedModel:
    return CNN7(in_channels, num_classes, image_size)


def _resnet18(in_channels: int, num_classes: int, image_size: tuple[int, int]) -> FedModel:
    from torchvision.models import resnet18

    return ResNet(resnet18, in_channels, num_classes)


def _resnet50(in_channels: int, num_classes: int, image_size: tuple[int, int]) -> FedModel:
    from torchvision.models import resnet50

    return ResNet(resnet50, in_channels, num_classes)


_BUILDERS: dict[str, Callable[[int, int, tuple[int, int]], FedModel]] = {
    "lenet5": _lenet5,
    "cnn7": _cnn7,
    "resnet18": _resnet18,
    "resnet50": _resnet50,
}


def available_models() -> list[str]:
    """Names accepted by ``build_model``."""
    return list(_BUILDERS)


def build_model(name: str, in_channels: int, num_classes: int, image_size: tuple[int, int] = (28, 28)) -> FedModel:
    """Build a freshly initialised model by name (seed torch beforehand for a reproducible init)."""
    if name not in _BUILDERS:
        raise ValueError(f"unknown model {name!r}; available: {available_models()}")
    return _BUILDERS[name](in_channels, num_classes, tuple(image_size))


def device_layout(model: FedModel, device: torch.device | str) -> FedModel:
    """``model`` with the memory layout that trains fastest on ``device``: channels-last on the CPU.

    With channels-last convolution weights oneDNN runs NHWC kernels (its NCHW max-pool with
    indices is the slow one): a LeNet5 SGD step at batch 32 takes ~20% less time on one CPU
    thread (docs/performance.md). Elsewhere the model is returned as is. Results agree with the
    default layout to float rounding, not bit for bit.
    """
    return model.to(memory_format=torch.channels_last) if torch.device(device).type == "cpu" else model

