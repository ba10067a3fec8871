"""GPU readiness without a GPU: device placement, host syncs, precision and the job's kernel settings.

Two stand-ins for a CUDA device:

* ``FakeTensorMode`` with ``cuda`` tensors (shapes and devices, no values): torch's own device rules.
  Every loss runs there (forward, plain and masked). Backward cannot: on a CUDA build without a GPU
  the autograd engine rejects a fake ``cuda`` device (``hasPrimaryContext expects a valid device
  index``), and the monitor needs values (bincount, boolean selection, NNLS on the host).
* ``on_device()``: tensors with real CPU values that report a non-CPU device (``DEVICE``, the
  ``lazy`` type, which the autograd engine accepts). Every op checks the CUDA rule (all tensors on one
  device, CPU 0-dim scalars excepted), a CPU generator with a device factory is refused, ``.numpy()``
  is refused, and host<->device traffic is counted: ``h2d`` copies and ``syncs`` (``.item()``,
  ``.tolist()``, copies to the host, ops whose output size depends on values). A vectorised round with
  every loss and one monitor observation run there and must give the CPU's numbers exactly.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode, return_and_correct_aliasing
from torch.utils._pytree import tree_leaves, tree_map

import fedbalance.jobs.run as jobs_mod
from fedbalance.jobs.config import load_config, configured_job
from fedbalance.common.records import Job
from fedbalance.monitor.estimators import Observer
from fedbalance.methods.losses import LOSSES, feed, get_loss
from fedbalance.methods.metrics import empirical_y_stats
from fedbalance.methods.models import build_model
from fedbalance.monitor.monitor import Monitor, simulated_updates
from fedbalance.training.sgd import PRECISIONS, local_sgd, precision
from fedbalance.training.train import CopyPlan, SGDConfig, copy_plan, train_copies
from fedbalance.training.vectorised import VectorisedOptions, make_masked_loss, takes_client_counts, train_copies_vectorised

ROOT = Path(__file__).resolve().parents[1]
DEVICE = torch.device("lazy", 0)
Q = 4
aten = torch.ops.aten
SIZE_FROM_VALUES = {aten.nonzero.default, aten.masked_select.default, aten.bincount.default, aten._unique2.default,
                    aten.unique_dim.default, aten.unique_consecutive.default}


class Traffic:
    """Host<->device traffic seen by ``on_device``: host-to-device copies and host synchronisations."""

    h2d = 0
    syncs = 0

    @classmethod
    def reset(cls) -> None:
        cls.h2d = cls.syncs = 0


class OnDevice(torch.Tensor):
    """A CPU tensor that reports ``DEVICE``: real values, the device rules of an accelerator."""

    inner: torch.Tensor

    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> OnDevice:
        return torch.Tensor._make_wrapper_subclass(
            cls, inner.size(), strides=inner.stride(), storage_offset=inner.storage_offset(), dtype=inner.dtype,
            layout=inner.layout, device=DEVICE, requires_grad=inner.requires_grad,
        )

    def __init__(self, inner: torch.Tensor) -> None:
        self.inner = inner

    def __repr__(self) -> str:  # noqa: D105
        return f"OnDevice({self.inner!r})"

    def tolist(self) -> Any:  # noqa: D102
        Traffic.syncs += 1
        return self.inner.tolist()

    def numpy(self, *, force: bool = False) -> Any:  # noqa: D102
        raise TypeError(f"can't convert {DEVICE} device type tensor to numpy. Use Tensor.cpu() first.")

    def __array__(self, *args: Any, **kwargs: Any) -> Any:  # noqa: D105
        raise TypeError(f"can't convert {DEVICE} device type tensor to numpy. Use Tensor.cpu() first.")

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:  # noqa: D105
        return _dispatch(func, args, kwargs or {})


def _host(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and not isinstance(t, OnDevice) and t.device.type == "cpu"


def _unwrap(t: Any) -> Any:
    return t.inner if isinstance(t, OnDevice) else t


def _dispatch(func: Any, args: tuple, kwargs: dict) -> Any:
    """Run ``func`` on the CPU values, enforcing the accelerator's device rules and counting traffic."""
    tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
    on_dev = any(isinstance(t, OnDevice) for t in tensors)
    target = kwargs.get("device")
    if func is aten._to_copy.default:
        src = args[0]
        to_dev = torch.device(target).type == DEVICE.type if target is not None else isinstance(src, OnDevice)
        out = func(_unwrap(src), **{**kwargs, "device": torch.device("cpu")})
        if to_dev and _host(src) and src.dim() > 0:
            Traffic.h2d += 1
        if not to_dev and isinstance(src, OnDevice):
            Traffic.syncs += 1
        return OnDevice(out) if to_dev else out
    if func is aten.copy_.default:
        dst, src = args[0], args[1]
        if isinstance(dst, OnDevice) and _host(src) and src.dim() > 0:
            Traffic.h2d += 1
        if _host(dst) and isinstance(src, OnDevice):
            Traffic.syncs += 1
        func(_unwrap(dst), _unwrap(src), **kwargs)
        return dst
    if func is aten._local_scalar_dense.default or func in SIZE_FROM_VALUES:
        Traffic.syncs += on_dev
    index_args = args[1] if func in (aten.index.Tensor, aten.index_put_.default, aten._index_put_impl_.default) else ()
    if func is aten.index.Tensor and on_dev and any(t is not None and t.dtype == torch.bool for t in index_args):
        Traffic.syncs += 1
    host = [t for t in tensors if _host(t) and t.dim() > 0]
    if on_dev and host:
        if all(any(t is i for i in index_args) for t in host):
            Traffic.h2d += len(host)  # CUDA copies host index tensors to the device for you, a sync each time
        else:
            shapes = [tuple(t.shape) for t in host]
            raise RuntimeError(f"{func}: expected all tensors to be on the same device, but found {DEVICE} and cpu {shapes}")
    wrap = on_dev if target is None else torch.device(target).type == DEVICE.type
    if wrap and target is not None and isinstance(kwargs.get("generator"), torch.Generator):
        raise RuntimeError(f"{func}: expected a '{DEVICE.type}' device type for generator but found 'cpu'")
    new_kwargs = tree_map(_unwrap, kwargs)
    if target is not None and torch.device(target).type == DEVICE.type:
        new_kwargs["device"] = torch.device("cpu")
    out = func(*tree_map(_unwrap, args), **new_kwargs)
    if not wrap:
        return out
    wrapped = tree_map(lambda t: OnDevice(t) if isinstance(t, torch.Tensor) and not isinstance(t, OnDevice) else t, out)
    return return_and_correct_aliasing(func, args, kwargs, wrapped)


class _Factories(TorchDispatchMode):
    """Sends ``device=DEVICE`` factory calls (``torch.zeros(..., device=d)``) to ``_dispatch``."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:  # noqa: D105
        kwargs = kwargs or {}
        if any(isinstance(t, OnDevice) for t in tree_leaves((args, kwargs))):
            return NotImplemented
        target = kwargs.get("device")
        if target is not None and torch.device(target).type == DEVICE.type:
            return _dispatch(func, args, kwargs)
        return func(*args, **kwargs)


@contextlib.contextmanager
def on_device() -> Iterator[type[Traffic]]:
    """Within the block ``DEVICE`` behaves as an accelerator (see the module docstring); traffic counts from zero."""
    Traffic.reset()
    with _Factories():
        yield Traffic


def host(t: torch.Tensor) -> torch.Tensor:
    """The CPU values of a (possibly ``OnDevice``) tensor, without counting traffic."""
    return t.inner if isinstance(t, OnDevice) else t


@pytest.fixture(autouse=True, scope="module")
def _one_thread(torch_one_thread):
    """Every test of this module runs with one torch thread (conftest.torch_one_thread)."""


def _data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, 1, 16, 16), generator=g, dtype=torch.uint8), torch.randint(0, Q, (n,), generator=g)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return build_model("lenet5", 1, Q, (16, 16))


def _loss(name: str) -> nn.Module:
    loss = get_loss(name, Q, **({"weight": torch.linspace(1.0, 1.5, Q)} if name == "ratio" else {}))
    feed(loss, prior=torch.linspace(1.0, 9.0, Q, dtype=torch.float64))
    return loss


# --- the stand-in device itself ----------------------------------------------------------------------


def test_the_stand_in_device_enforces_placement_and_counts_traffic() -> None:
    with on_device() as traffic:
        a = torch.arange(6.0).to(DEVICE)
        assert a.device == DEVICE and traffic.h2d == 1
        assert float((a * torch.tensor(2.0)).sum()) == 30.0 and traffic.syncs == 1  # a CPU scalar is fine, float() syncs
        with pytest.raises(RuntimeError, match="same device"):
            a * torch.ones(6)
        with pytest.raises(RuntimeError, match="generator"):
            torch.randperm(5, generator=torch.Generator(), device=DEVICE)
        with pytest.raises(TypeError, match="numpy"):
            a.numpy()
        assert a[torch.tensor([1, 3])].cpu().tolist() == [1.0, 3.0] and traffic.h2d == 2 and traffic.syncs == 2
        b = torch.zeros(3, device=DEVICE, requires_grad=True)
        (b * torch.arange(3.0, device=DEVICE)).sum().backward()
        assert host(b.grad).tolist() == [0.0, 1.0, 2.0] and b.grad.device == DEVICE


# --- every loss on fake CUDA tensors (FakeTensorMode) ---------------------------------------------------


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_every_loss_on_fake_cuda(name: str) -> None:
    """Plain and masked forms of every registered loss on fake ``cuda`` tensors, buffers moved with ``.to``."""
    with FakeTensorMode(allow_non_fake_inputs=True):
        loss = _loss(name).to("cuda")
        logits = torch.randn(8, Q, device="cuda")
        y = torch.randint(0, Q, (8,), device="cuda")
        mask = torch.ones(8, dtype=torch.bool, device="cuda")
        feed(loss, client_counts=torch.ones(Q, device="cuda"))
        out = loss(logits, y)
        assert out.device.type == "cuda" and out.shape == ()
        counts = (torch.ones(Q, device="cuda"),) if takes_client_counts(loss) else ()
        masked = make_masked_loss(loss)(logits, y, mask, *counts)
        assert masked.device.type == "cuda" and masked.shape == ()


def test_a_loss_left_on_the_host_fails_on_fake_cuda() -> None:
    """The check can fail: the Ratio Loss's weights not moved with the loss meet CUDA logits."""
    with FakeTensorMode(allow_non_fake_inputs=True):
        loss = _loss("ratio")
        with pytest.raises(Exception, match="device"):
            loss(torch.randn(8, Q, device="cuda"), torch.randint(0, Q, (8,), device="cuda"))


# --- one vectorised round with every loss, one monitor observation ----------------------------------------


def _round(device: torch.device | str, name: str, path: str) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    model = _model().to(device)
    x, y = _data(45, seed=1)
    x, y = x.to(device), y.to(device)
    sets = [(x[:20], y[:20]), (x[20:33], y[20:33]), (x[33:], y[33:])]
    gens = [torch.Generator().manual_seed(k) for k in range(3)]
    return train_copies(model, sets, _loss(name).to(device), SGDConfig(lr=0.05, batch_size=8, epochs=2), gens, path=path)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_vectorised_round_on_the_device_gives_the_cpus_numbers(name: str) -> None:
    cpu_states, cpu_losses = _round("cpu", name, "vectorised")
    with on_device():
        states, losses = _round(DEVICE, name, "vectorised")
    assert all(v.device == DEVICE for v in states.values()) and losses.device.type == "cpu"
    assert list(states) == list(cpu_states)
    assert all(torch.equal(host(states[k]), cpu_states[k]) for k in states)
    assert torch.equal(losses, cpu_losses)


def _observe(device: torch.device | str, path: str) -> dict[str, Any]:
    model = _model().to(device)
    x, y = _data(40, seed=2)
    aux_y = torch.arange(40) % Q
    cfg = SGDConfig(lr=0.05, batch_size=8, epochs=1)
    observer = Observer(Monitor(x.to(device), aux_y.to(device), Q, cfg, path=path), ["released", "nnls", "paper", "simulated", "pooled"])
    after = {k: v + 0.01 * torch.ones_like(v) if v.is_floating_point() else v for k, v in model.state_dict().items()}
    return observer.observe(model, after, [30, 12], torch.Generator().manual_seed(3), clients=[0, 1])


@pytest.mark.parametrize("path", ["vectorised", "sequential"])
def test_monitor_observation_on_the_device_gives_the_cpus_numbers(path: str) -> None:
    ref = _observe("cpu", path)
    with on_device():
        got = _observe(DEVICE, path)
    assert set(got["estimates"]) == set(ref["estimates"]) == {"released", "nnls", "paper", "simulated", "pooled"}
    for k, est in ref["estimates"].items():
        assert torch.equal(host(torch.as_tensor(got["estimates"][k].counts)), torch.as_tensor(est.counts)), k
    assert torch.equal(host(got["weights"]).cpu(), ref["weights"].cpu())
    assert host(ref["weights"]).std() > 0  # the monitor saw the update (the comparison is not vacuous)


# --- no host syncs per step ----------------------------------------------------------------------------


@pytest.mark.parametrize("epochs", [1, 3])
def test_sequential_sgd_moves_the_schedule_once(epochs: int) -> None:
    """One host-to-device copy (the schedule) and one sync (the mean loss) per client, whatever the steps."""
    with on_device() as traffic:
        model = _model().to(DEVICE)
        x, y = _data(40, seed=4)
        x, y = x.to(DEVICE), y.to(DEVICE)
        traffic.reset()
        local_sgd(model, x, y, _loss("ce").to(DEVICE), SGDConfig(lr=0.05, batch_size=8, epochs=epochs), torch.Generator().manual_seed(0))
        assert (traffic.h2d, traffic.syncs) == (1, 1), (traffic.h2d, traffic.syncs, 5 * epochs, "steps")


def _captured_round(device: torch.device | str, epochs: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    model = _model().to(device)
    x, y = _data(45, seed=1)
    x, y = x.to(device), y.to(device)
    sets = [(x[:20], y[:20]), (x[20:33], y[20:33]), (x[33:], y[33:])]
    gens = [torch.Generator().manual_seed(k) for k in range(3)]
    cfg = SGDConfig(lr=0.05, batch_size=8, epochs=epochs, momentum=0.9)
    return train_copies_vectorised(model, sets, _loss("ratio").to(device), cfg, gens, VectorisedOptions(capture=True))


def test_the_captured_round_runs_on_the_device_with_no_traffic_per_step() -> None:
    """The captured step on the stand-in device: the CPU's numbers, and the same host<->device traffic whatever the
    number of steps (the schedule, masks and step counter live on the device; nothing goes to the host per step)."""
    traffic_of = []
    for epochs in (1, 3):
        cpu_states, cpu_losses = _captured_round("cpu", epochs)
        with on_device() as traffic:
            states, losses = _captured_round(DEVICE, epochs)
            traffic_of.append((traffic.h2d, traffic.syncs))
        assert all(torch.equal(host(states[k]), cpu_states[k]) for k in states) and torch.equal(losses, cpu_losses)
    assert traffic_of[0] == traffic_of[1], traffic_of


def test_simulated_client_moves_its_batches_once() -> None:
    """The ``simulated`` estimator's client: its step count does not change the host-to-device copies."""
    copies = []
    for steps in (4, 12):
        with on_device() as traffic:
            model = _model().to(DEVICE)
            x, _ = _data(24, seed=5)
            aux_x, aux_y = x.to(DEVICE), (torch.arange(24) % Q).to(DEVICE)
            traffic.reset()
            simulated_updates(model, aux_x, aux_y, Q, SGDConfig(batch_size=6), steps, torch.ones(Q), torch.Generator().manual_seed(1), probes=2)
            copies.append(traffic.h2d)
    assert copies[0] == copies[1] == 1


def test_empirical_y_stats_sync_once_not_per_batch() -> None:
    model = _model()
    x, y = _data(160, seed=6)
    ref = empirical_y_stats(model, x, y, batch_size=16)
    with on_device() as traffic:
        model_d = model.to(DEVICE)
        xd, yd = x.to(DEVICE), y.to(DEVICE)
        traffic.reset()
        got = empirical_y_stats(model_d, xd, yd, batch_size=16)
        assert (traffic.syncs, traffic.h2d) == (2, 0), (traffic.syncs, "10 batches")  # the classes, the results
    assert got == ref and ref["emp_cos"] is not None and ref["emp_cv"] is not None


# --- precision policy ----------------------------------------------------------------------------------


def _tf32_flags() -> tuple[bool, bool, str, str]:
    b = torch.backends
    return b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32, b.cuda.matmul.fp32_precision, b.cudnn.conv.fp32_precision


def test_precision_sets_both_flags_and_restores_them() -> None:
    before = _tf32_flags()
    assert before[1], "torch's default uses TF32 for cuDNN convolutions: fp32 must turn it off"
    with precision("fp32"):
        assert _tf32_flags() == (False, False, "ieee", "ieee")
        with precision("tf32"):
            assert _tf32_flags() == (True, True, "tf32", "tf32")
        assert _tf32_flags() == (False, False, "ieee", "ieee")
    assert _tf32_flags() == before
    with pytest.raises(ValueError, match="fp16"):
        with precision("fp16"):
            pass
    assert PRECISIONS == ("fp32", "tf32")


@pytest.mark.parametrize("path", ["sequential", "vectorised"])
@pytest.mark.parametrize("policy", PRECISIONS)
def test_both_paths_train_under_the_plans_precision(path: str, policy: str) -> None:
    """The flags seen by the loss at every step (both paths call the loss module) are the plan's, and come back after."""
    seen: list[tuple[bool, bool]] = []
    loss = _loss("ce")
    loss.register_forward_pre_hook(lambda *_: seen.append(_tf32_flags()[:2]))
    before = _tf32_flags()
    x, y = _data(16, seed=7)
    with copy_plan(CopyPlan(precision=policy)):
        train_copies(_model(), [(x, y)], loss, SGDConfig(batch_size=8), [torch.Generator().manual_seed(0)], path=path)
    assert len(seen) == 2 and all(s == (policy == "tf32",) * 2 for s in seen), seen
    assert _tf32_flags() == before


# --- the job: precision recorded and enforced, deterministic mode and cuBLAS, resume on the CPU --------------


def _tiny(quick: dict) -> dict:
    spec = configured_job(quick, Job("losses", "mnist", "g10", "ratio", 0))
    spec["partition"].update(num_clients=4, majority_samples=12)
    spec["monitor"]["aux_per_class"] = 8
    spec.update(clients_per_round=3, rounds=3, batch_size=16, lr=0.05, selection="random")
    return spec


class _Killed(Exception):
    pass


def test_job_precision_is_recorded_and_a_resume_under_another_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _tiny(load_config(ROOT / "config" / "quick.yaml"))
    inside: list[tuple[bool, bool, bool]] = []

    def kill(state: Any, row: dict) -> None:
        inside.append((torch.are_deterministic_algorithms_enabled(), *_tf32_flags()[:2]))
        if row["round"] == 1:
            raise _Killed

    before = _tf32_flags()
    with pytest.raises(_Killed):
        jobs_mod.run_job(spec, tmp_path, device="cpu", progress=False, on_round=kill, deterministic=True)
    assert inside == [(True, False, False)] * 2  # deterministic and strict fp32 during the job
    assert not torch.are_deterministic_algorithms_enabled() and _tf32_flags() == before  # both restored after it
    ckpt = torch.load(tmp_path / jobs_mod.CHECKPOINT, weights_only=False)
    assert ckpt["runtime"]["precision"] == "fp32" and ckpt["chunks"] == {}
    with pytest.raises(jobs_mod.JobError, match=r"precision 'fp32' -> 'tf32'"):
        jobs_mod.run_job(spec, tmp_path, device="cpu", progress=False, precision="tf32", deterministic=True)
    with pytest.raises(jobs_mod.JobError, match="precision must be one of fp32, tf32"):
        jobs_mod.run_job(spec, tmp_path, device="cpu", progress=False, precision="bf16", deterministic=True)
    loads: list[Any] = []
    real_load = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: loads.append(k.get("map_location")) or real_load(*a, **k))
    metrics = jobs_mod.run_job(spec, tmp_path, device="cpu", progress=False, deterministic=True)
    assert loads == ["cpu"]  # the checkpoint is read onto the host whatever the job's device
    assert metrics["rounds"] == 3 and metrics["precision"] == "fp32" and metrics["chunking"] is None
    assert json.loads((tmp_path / "metrics.json").read_text())["precision"] == "fp32"


def test_cublas_workspace_is_set_when_the_job_module_is_imported() -> None:
    env = {k: v for k, v in os.environ.items() if k != "CUBLAS_WORKSPACE_CONFIG"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH")) if p)
    code = "import os, torch; import fedbalance.jobs.run; print(os.environ.get('CUBLAS_WORKSPACE_CONFIG'))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ":4096:8"


def test_cli_and_workflow_pass_the_precision(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fedbalance import cli

    calls: list[dict] = []
    monkeypatch.setattr(jobs_mod, "run_job", lambda spec, out, **kw: calls.append(kw) or {
        "final": {"acc": 0.5, "acc_minority": None, "auc_micro": None}, "wall_time_s": 0.0})
    base = ["train", "--config", str(ROOT / "config" / "quick.yaml"), "--experiment", "losses", "--dataset", "mnist",
            "--setting", "g10", "--loss", "ce", "--seed", "0", "--out", str(tmp_path / "o")]
    assert cli.main(base) == 0 and cli.main([*base, "--precision", "tf32"]) == 0
    assert [c["precision"] for c in calls] == ["fp32", "tf32"]
    assert load_config(ROOT / "config" / "quick.yaml")["precision"] == "fp32"
    assert 'precision=config["precision"]' in (ROOT / "workflow" / "rules" / "train.smk").read_text()
    assert "precision=smk.params.precision" in (ROOT / "workflow" / "scripts" / "train.py").read_text()
