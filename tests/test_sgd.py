"""FunctionalSGD: the same steps as torch.optim.SGD, bit for bit, without an Optimizer object."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fedbalance.methods.models import LeNet5
from fedbalance.training.sgd import FunctionalSGD, SGDConfig, batch_schedule, local_sgd

SRC = str(Path(__file__).resolve().parents[1] / "src")


@pytest.mark.parametrize("momentum, wd", [(0.9, 5e-4), (0.0, 0.0), (0.5, 0.0)])
def test_functional_sgd_equals_torch_sgd(momentum: float, wd: float) -> None:
    torch.manual_seed(0)
    a = LeNet5(1, 10)
    b = LeNet5(1, 10)
    b.load_state_dict(a.state_dict())
    b.fc1.weight.requires_grad_(False)  # a parameter without a gradient is skipped by both
    a.fc1.weight.requires_grad_(False)
    cfg = SGDConfig(lr=0.05, momentum=momentum, weight_decay=wd)
    ref = torch.optim.SGD(a.parameters(), lr=cfg.lr, momentum=momentum, weight_decay=wd)
    ours = FunctionalSGD(b.parameters(), cfg)
    x, y = torch.randn(6, 16, 1, 28, 28), torch.randint(0, 10, (6, 16))
    for t in range(6):
        for model, opt in ((a, ref), (b, ours)):
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(x[t]), y[t]).backward()
            opt.step()
        for (name, pa), pb in zip(a.named_parameters(), b.parameters(), strict=True):
            assert torch.equal(pa, pb), (t, name)
    assert not torch.equal(a.fc2.weight, LeNet5(1, 10).fc2.weight)  # it did move


def test_local_sgd_equals_a_loop_with_torch_sgd() -> None:
    torch.manual_seed(1)
    model = LeNet5(1, 10)
    twin = LeNet5(1, 10)
    twin.load_state_dict(model.state_dict())
    x, y = torch.randint(0, 256, (50, 1, 28, 28), dtype=torch.uint8), torch.randint(0, 10, (50,))
    cfg = SGDConfig(lr=0.02, momentum=0.9, weight_decay=5e-4, batch_size=8, epochs=2)
    loss = local_sgd(model, x, y, torch.nn.CrossEntropyLoss(), cfg, torch.Generator().manual_seed(3))
    opt = torch.optim.SGD(twin.parameters(), lr=0.02, momentum=0.9, weight_decay=5e-4)
    losses = []
    for idx in batch_schedule(50, cfg, torch.Generator().manual_seed(3)):
        out = torch.nn.functional.cross_entropy(twin(x[idx].float() / 255.0), y[idx])
        opt.zero_grad()
        out.backward()
        opt.step()
        losses.append(float(out))
    for pa, pb in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(pa, pb)
    assert loss == pytest.approx(sum(losses) / len(losses), rel=1e-6)


def test_functional_sgd_does_not_import_dynamo() -> None:
    code = (
        "import sys, torch\n"
        "from fedbalance.training.sgd import FunctionalSGD, SGDConfig\n"
        "m = torch.nn.Linear(3, 2)\n"
        "opt = FunctionalSGD(m.parameters(), SGDConfig())\n"
        "m(torch.ones(1, 3)).sum().backward(); opt.step()\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": SRC}, check=True)
    assert out.stdout.strip() == "False"


def _flags() -> tuple[bool, bool]:
    return torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()


@pytest.mark.parametrize("mode, warn_only", [(True, False), (True, True), (False, False)])
def test_deterministic_flags_equal_torchs(mode: bool, warn_only: bool) -> None:
    from fedbalance.training.sgd import use_deterministic_algorithms

    before = _flags()
    try:
        torch.use_deterministic_algorithms(mode, warn_only=warn_only)
        want = _flags()
        torch.use_deterministic_algorithms(not mode)
        use_deterministic_algorithms(mode, warn_only=warn_only)
        assert _flags() == want == (mode, warn_only and mode)
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


def test_a_deterministic_job_block_does_not_import_inductor_and_compile_is_told() -> None:
    code = (
        "import sys, torch\n"
        "from fedbalance.jobs.run import deterministic_kernels\n"
        "from fedbalance.training.sgd import compile_deterministic\n"
        "with deterministic_kernels(torch.device('cpu'), True):\n"
        "    on = torch.are_deterministic_algorithms_enabled()\n"
        "    before = 'torch._inductor.config' in sys.modules\n"
        "    compile_deterministic(lambda x: x + 1)\n"
        "    import torch._inductor.config as c\n"
        "    told = c.deterministic\n"
        "print(on, before, told, torch.are_deterministic_algorithms_enabled())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": SRC}, check=True)
    assert out.stdout.split() == ["True", "False", "True", "False"]
