"""Each plug-in point's contract, tried once on a tiny synthetic input of a job's shapes (docs/extending.md).

``config.validate`` calls these when a config that uses plug-ins loads (the CLI and the Snakefile alike), before any
file is written; each check is cached by the plug-in's target and version and the shapes it was tried on, so a
workflow that parses its config often pays for it once per process. What they check:

* ``check_loss``: the loss builds as the engine builds it (``losses.get_loss`` with the job's ``loss_params`` and its
  number of classes Q), takes what it ``receives`` (π, the prior, a client's own label counts: a client-counts loss
  must hold ``num_classes``), and returns, on a batch of ``BATCH`` samples with and without the sample mask, a finite
  scalar with a finite gradient; a loss declared vectorisable that may run on the vectorised path (``path`` auto or
  vectorised) does the same for two copies at once under ``torch.func.vmap`` (what the vectorised path and packs run).
* ``check_estimator``: the estimator loads and takes one argument (``estimators.as_estimator``) and, called once on a
  synthetic round (``RoundInputs`` of a small stand-in model with the job's image shape and Q classes, or a
  ``Track`` of three rounds of its requirements' estimates), returns Q finite non-negative counts.
* ``check_dataset``: the source is a ``data.Source`` whose declared classes (with the dataset's options), channels and
  image size the job's model takes: a fresh model (torch's random state kept) maps two blank images of the declared
  shape to logits of its classes; no data is read. What ``load`` yields is checked when the data is
  loaded (``data.load_dataset``: rule prepare_data, before any partition, and every job).

The same contracts guard every call while a job runs: ``estimators.as_estimator``'s entry checks each estimate,
``fl.run_rounds`` each round's loss (``losses.check_loss_value``), ``data.load_dataset`` the data.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import torch
from torch import nn

from fedbalance.common import plugins
from fedbalance.data.datasets import dataset_info, source_entry
from fedbalance.monitor.estimators import REGISTRY, RoundInputs, Track, entry
from fedbalance.methods.losses import CrossEntropyLoss, check_loss_value, feed, get_loss, receives
from fedbalance.methods.models import FedModel, build_model
from fedbalance.monitor.monitor import Monitor
from fedbalance.training.sgd import SGDConfig, client_counts

BATCH = 6
"""Samples in the synthetic batch a loss is tried on (the last one padding, mask 0)."""
HIDDEN = 8
"""Hidden units of the stand-in model an estimator is tried on."""
CLIENT_TOTAL = 40
"""Samples of each of the two synthetic clients of an estimator's round."""


def _fail(what: str, exc: BaseException) -> plugins.PluginError:
    return plugins.PluginError(f"{what} ({plugins.one_line(exc)})")


@functools.lru_cache(maxsize=256)
def check_loss(name: str, version: str | None, num_classes: int, params: str = "{}", vectorised: bool = True) -> None:
    """PluginError saying what the loss ``name`` (a plug-in, at ``version``) breaks of the loss contract on a batch of
    ``num_classes`` classes with constructor arguments ``params`` (JSON); None when it keeps it (cached). ``vectorised``:
    the job may train on the vectorised path (``path`` auto or vectorised), so a vectorisable loss is tried under vmap
    too (a second or two the first time a process uses vmap)."""
    q = num_classes
    kwargs = json.loads(params)
    try:
        loss_fn = get_loss(name, q, **kwargs)
    except plugins.PluginError:
        raise
    except Exception as exc:  # noqa: BLE001 - user code: reported as one line
        raise _fail(f"cannot be built as get_loss({name!r}, {q}, **{kwargs}) builds it", exc) from None
    took = receives(loss_fn)
    gen = torch.Generator().manual_seed(0)
    target = torch.arange(BATCH) % q
    counts = torch.bincount(target, minlength=q).float() + 1.0
    if "client_counts" in took and getattr(loss_fn, "num_classes", None) != q:
        raise plugins.PluginError(
            f"receives client_counts, but after get_loss its num_classes is {getattr(loss_fn, 'num_classes', None)!r}, "
            f"not {q}: its constructor must take num_classes and keep it (CountsLoss(num_classes, ...) does), the "
            "engine counts each client's labels with it")
    try:
        feed(loss_fn, weights=1.0 + torch.rand(q, generator=gen), prior=counts)
        if "client_counts" in took:
            feed(loss_fn, client_counts=client_counts(loss_fn, target))
    except Exception as exc:  # noqa: BLE001
        raise _fail(f"does not take what it receives ({sorted(took)}) as the engine hands it over", exc) from None
    mask = torch.ones(BATCH)
    mask[-1] = 0.0
    for m in (None, mask):
        logits = torch.randn(BATCH, q, generator=gen).requires_grad_(True)
        where = f"forward(logits [{BATCH}, {q}], target [{BATCH}]{', mask' if m is not None else ''})"
        try:
            value = loss_fn(logits, target, m)
        except Exception as exc:  # noqa: BLE001
            raise _fail(f"{where} raised", exc) from None
        check_loss_value(value, where)
        try:
            (grad,) = torch.autograd.grad(value, logits)
        except Exception as exc:  # noqa: BLE001
            raise _fail(f"{where} has no gradient with respect to the logits", exc) from None
        if not bool(torch.isfinite(grad).all()):
            raise plugins.PluginError(f"{where}: its gradient with respect to the logits is not finite")
    if vectorised and getattr(loss_fn, "vectorisable", True):
        _check_vmap(loss_fn, q, target, mask, counts, gen)


def _check_vmap(loss_fn: nn.Module, q: int, target: torch.Tensor, mask: torch.Tensor, counts: torch.Tensor,
                gen: torch.Generator) -> None:
    """Two copies' gradients at once under ``torch.func.vmap``, as the vectorised path takes them."""
    from fedbalance.training.vectorised import make_masked_loss, takes_client_counts

    try:
        masked = make_masked_loss(loss_fn)
        logits = torch.randn(2, BATCH, q, generator=gen)
        args = [target.expand(2, -1), mask.expand(2, -1)] + ([counts.expand(2, -1)] if takes_client_counts(loss_fn) else [])
        grads = torch.func.vmap(torch.func.grad(lambda z, *rest: masked(z, *rest)))(logits, *args)
    except Exception as exc:  # noqa: BLE001
        raise _fail("is vectorisable (the default) but fails under torch.func.vmap, as the vectorised path and packs "
                    "run it: write it vmap-safe (no .item(), no boolean indexing, no data-dependent shape) or set "
                    "vectorisable = False", exc) from None
    if not bool(torch.isfinite(grads).all()):
        raise plugins.PluginError("under torch.func.vmap (the vectorised path) its gradient is not finite")


class _Probe(FedModel):
    """The stand-in model an estimator is tried on: flatten, ``HIDDEN`` ReLU units, the classifier W."""

    def __init__(self, in_channels: int, num_classes: int, image_size: tuple[int, int]) -> None:
        super().__init__()
        self.hidden = nn.Linear(in_channels * image_size[0] * image_size[1], HIDDEN)
        self.classifier = nn.Linear(HIDDEN, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.hidden(torch.flatten(x, 1)))


def synthetic_round(num_classes: int, in_channels: int = 1, image_size: tuple[int, int] = (28, 28)) -> RoundInputs:
    """A round of two clients of ``CLIENT_TOTAL`` samples on a stand-in model (``_Probe``), two aux samples a class."""
    q = num_classes
    gen = torch.Generator().manual_seed(0)
    torch_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(0)
        model = _Probe(in_channels, q, tuple(image_size))
    finally:
        torch.random.set_rng_state(torch_state)
    aux_y = torch.arange(q).repeat_interleave(2)
    aux_x = torch.randint(0, 256, (2 * q, in_channels, *image_size), dtype=torch.uint8, generator=gen)
    monitor = Monitor(aux_x, aux_y, q, SGDConfig(lr=0.05, momentum=0.0, weight_decay=0.0, batch_size=2, epochs=1))
    after = {k: v.detach().clone() for k, v in model.state_dict().items()}
    after[monitor.weight_key] += 0.01 * torch.randn(after[monitor.weight_key].shape, generator=gen)
    return RoundInputs(monitor, model, after, [CLIENT_TOTAL, CLIENT_TOTAL], gen, loss_fn=CrossEntropyLoss())


def synthetic_track(num_classes: int, requires: tuple[str, ...], rounds: int = 3) -> Track:
    """A track of ``rounds`` rounds of the same two clients, each round's ``requires`` estimates positive counts that
    sum to the clients' total."""
    q = num_classes
    gen = torch.Generator().manual_seed(0)
    track = Track()
    for _ in range(rounds):
        shares = torch.rand(q, generator=gen, dtype=torch.float64) + 0.5
        counts = (shares / shares.sum() * 2 * CLIENT_TOTAL).tolist()
        track.add([0, 1], [CLIENT_TOTAL, CLIENT_TOTAL], {r: counts for r in requires})
    return track


@functools.lru_cache(maxsize=256)
def check_estimator(name: str, target: str | None, version: str | None, num_classes: int, in_channels: int = 1,
                    image_size: tuple[int, int] = (28, 28)) -> None:
    """PluginError saying what estimator ``name`` (a plug-in, at ``version``; ``target``: its dotted path when the config
    names it by one) breaks of the estimator contract on a synthetic round of ``num_classes`` classes (cached)."""
    est = entry(name, target)
    if name in REGISTRY and target is None:
        return
    inputs: Any = synthetic_track(num_classes, est.requires) if est.history else synthetic_round(
        num_classes, in_channels, image_size)
    est.fn(inputs)


@functools.lru_cache(maxsize=64)
def check_dataset(source: str, version: str | None, model: str, options: str = "{}") -> None:
    """PluginError saying what the data source ``source`` (a plug-in, at ``version``) breaks of the dataset contract
    with the dataset's ``options`` (JSON) and ``model`` (cached): its declared shape must be one the model takes."""
    from fedbalance.data.datasets import DataError

    try:
        source_entry(source)
        info = dataset_info(source, **json.loads(options))
    except DataError as exc:
        raise plugins.PluginError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - num_classes of the options is user code
        raise _fail("its declared classes cannot be computed from the options", exc) from None
    q, c, size = info["num_classes"], info["in_channels"], tuple(info["image_size"])
    if not isinstance(q, int) or q < 2:
        raise plugins.PluginError(f"declares {q!r} classes with these options; a dataset has 2 or more")
    try:
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            out = build_model(model, c, q, size).eval()(torch.zeros(2, c, *size))
    except Exception as exc:  # noqa: BLE001
        raise _fail(f"the model {model!r} cannot take its declared images [{c}, {size[0]}, {size[1]}] of {q} classes",
                    exc) from None
    if tuple(out.shape) != (2, q):
        raise plugins.PluginError(f"the model {model!r} maps its declared images to logits {tuple(out.shape)}, not "
                                  f"[N, {q}]")
