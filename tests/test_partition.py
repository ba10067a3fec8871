"""Tests of fedbalance.data.partition on small synthetic label (and writer) arrays."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from fedbalance.data.partition import (
    Partition,
    PartitionError,
    composition,
    cosine_similarity,
    imbalance_partition,
    make_partition,
    mismatch_partition,
    monitor_partition,
    unused_writers,
    writer_partition,
)

Q = 10
MINORITY = (2, 4, 7)


@pytest.fixture(scope="module")
def labels() -> np.ndarray:
    """5,000 samples per class of 10 classes, shuffled."""
    return np.random.default_rng(123).permutation(np.repeat(np.arange(Q), 5000))


@pytest.fixture(scope="module")
def femnist() -> tuple[np.ndarray, np.ndarray]:
    """300 writers (ids 1000, 1003, ...) with 20..40 samples; each has a class-9 sample."""
    rng = np.random.default_rng(7)
    ys, ws = [], []
    for i in range(300):
        n = int(rng.integers(20, 41))
        ys.append(np.concatenate([[9], rng.integers(0, Q, size=n - 1)]))
        ws.append(np.full(n, 1000 + 3 * i))
    order = rng.permutation(sum(len(y) for y in ys))
    return np.concatenate(ys)[order], np.concatenate(ws)[order]


def assert_disjoint_sorted(p: Partition, n: int) -> None:
    pooled = np.concatenate(p.clients)
    assert np.unique(pooled).size == pooled.size
    assert pooled.min() >= 0 and pooled.max() < n
    for c in p.clients:
        assert c.dtype == np.int64 and np.all(np.diff(c) > 0)


def counts_by_loop(labels: np.ndarray, idx: np.ndarray) -> list[int]:
    out = [0] * Q
    for i in idx.tolist():
        out[int(labels[i])] += 1
    return out


def test_cosine_similarity_and_composition_by_hand():
    assert cosine_similarity([1, 0], [0, 1]) == 0.0
    assert cosine_similarity([3, 4], [6, 8]) == pytest.approx(1.0)
    assert cosine_similarity([1, 1, 0], [1, 0, 0]) == pytest.approx(1 / math.sqrt(2))
    assert cosine_similarity([0, 0], [1, 2]) == 0.0
    y = np.array([0, 2, 2, 1, 2, 0])
    assert composition(y, [1, 2, 5], 4).tolist() == [1, 0, 2, 0]


def test_stats_by_hand():
    y = np.array([0, 0, 0, 0, 1, 1, 2, 2, 2, 2, 2, 2])
    p = Partition((np.array([0, 1, 2, 4]), np.array([3, 5, 6, 7, 8, 9, 10, 11])), 3)
    s = p.stats(y)
    assert s["class_counts"] == [[3, 1, 0], [1, 1, 6]]
    assert s["global_counts"] == [4, 2, 6]
    assert s["gamma"] == 3.0
    assert s["local_gamma"] == [3.0, 6.0]
    cs0 = (3 * 4 + 1 * 2) / (math.sqrt(10) * math.sqrt(56))
    cs1 = (4 + 2 + 36) / (math.sqrt(38) * math.sqrt(56))
    assert s["cs"] == pytest.approx([cs0, cs1])
    assert s["mean_cs"] == pytest.approx((cs0 + cs1) / 2)
    assert s["num_samples"] == [4, 8]
    assert Partition((np.array([0, 4]),), 3).stats(y)["gamma"] == math.inf


def test_partition_rejects_overlap_and_sorts():
    with pytest.raises(PartitionError, match="disjoint"):
        Partition((np.array([1, 2]), np.array([2, 3])), 2)
    p = Partition(([5, 1, 3],), 2)
    assert p.clients[0].tolist() == [1, 3, 5] and p.pooled().tolist() == [1, 3, 5]


@pytest.mark.parametrize("gamma, minority_count", [(1, 250), (10, 25), (20, 12), (50, 5), (100, 2)])
def test_imbalance_exact_counts_and_gamma(labels, gamma, minority_count):
    p = imbalance_partition(labels, num_classes=Q, gamma=gamma, seed=3)
    assert_disjoint_sorted(p, labels.size)
    assert p.minority_classes == MINORITY and p.scheme == "imbalance"
    counts = np.array([counts_by_loop(labels, c) for c in p.clients])
    held = counts > 0
    assert counts.shape == (20, Q)
    assert np.all((held.sum(1) >= 3) & (held.sum(1) <= 6))
    degrees = held.sum(0)
    assert np.all(degrees == degrees[0])
    expected = np.where(np.isin(np.arange(Q), MINORITY), minority_count, 250)
    assert np.array_equal(counts, held * expected)
    s = p.stats(labels)
    assert s["gamma"] == 250 / minority_count
    assert s["class_counts"] == counts.tolist()


def test_imbalance_class_counts_vary(labels):
    sizes = set()
    for seed in range(3):
        p = imbalance_partition(labels, num_classes=Q, seed=seed)
        sizes |= set((p.class_counts(labels) > 0).sum(1).tolist())
    assert sizes == {3, 4, 5, 6}


def test_imbalance_seed_reproducible(labels):
    a = imbalance_partition(labels, num_classes=Q, gamma=10, seed=11)
    b = imbalance_partition(labels, num_classes=Q, gamma=10, seed=11)
    c = imbalance_partition(labels, num_classes=Q, gamma=10, seed=12)
    assert a == b
    assert a != c
    assert any(not np.array_equal(x, y) for x, y in zip(a.clients, c.clients))


def test_accepts_torch_tensors(labels):
    torch = pytest.importorskip("torch")
    assert composition(torch.tensor([0, 2, 2, 1]), torch.tensor([0, 3]), 3).tolist() == [1, 1, 0]
    a = imbalance_partition(torch.from_numpy(labels), num_classes=Q, gamma=10, seed=4)
    assert a == imbalance_partition(labels, num_classes=Q, gamma=10, seed=4)


def test_json_round_trip_and_rebuild(labels):
    p = imbalance_partition(labels, num_classes=Q, gamma=20, seed=5)
    d = json.loads(json.dumps(p.to_json()))
    q = Partition.from_json(d)
    assert q == p
    assert all(c.dtype == np.int64 for c in q.clients)
    assert d["params"] == {
        "num_classes": 10, "num_clients": 20, "min_classes": 3, "max_classes": 6,
        "majority_samples": 250, "gamma": 20, "minority_classes": [2, 4, 7], "seed": 5,
    }
    assert make_partition(p.scheme, labels, **p.params) == p
    assert np.array_equal(p.pooled(), np.sort(np.concatenate(p.clients)))


def test_imbalance_lacking_samples_message():
    y = np.repeat(np.arange(Q), [3000, 3000, 3000, 1100, 3000, 3000, 900, 3000, 3000, 3000])
    # 20 clients x 5 classes -> each class held by 10 clients x 250 samples.
    with pytest.raises(PartitionError, match="class 3 needs 2500 samples, has 1100; class 6 needs 2500 samples, has 900"):
        mismatch_partition(y, num_classes=Q, classes_per_client=5, gamma=1, seed=0)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_clients=2, min_classes=3, max_classes=4), "num_clients\\*max_classes = 8 < num_classes=10"),
        (dict(max_classes=11), "max_classes <= num_classes=10"),
        (dict(min_classes=5, max_classes=4), "min_classes <= max_classes"),
        (dict(num_clients=3, min_classes=4, max_classes=4), "multiple of num_classes=10"),
        (dict(minority_classes=(2, 10)), r"minority_classes \[10\]"),
        (dict(gamma=0.5), "gamma must be"),
    ],
)
def test_imbalance_impossible_parameters(labels, kwargs, message):
    with pytest.raises(PartitionError, match=message):
        imbalance_partition(labels, num_classes=Q, seed=0, **kwargs)


def test_mismatch_fixed_classes_and_decreasing_cs(labels):
    means = []
    for c in (5, 4, 3, 2):
        p = mismatch_partition(labels, num_classes=Q, classes_per_client=c, gamma=10, seed=0)
        held = p.class_counts(labels) > 0
        assert np.all(held.sum(1) == c)
        assert np.all(held.sum(0) == 20 * c // Q)
        assert p.stats(labels)["gamma"] == 10.0
        means.append(p.stats(labels)["mean_cs"])
    assert means[0] > means[1] > means[2] > means[3]


@pytest.mark.parametrize("c", [5, 4, 3, 2])
def test_mismatch_balanced_cs_is_sqrt_c_over_q(labels, c):
    # v_j = s * (c ones), V = s*m * (Q ones): CS = s*c*s*m / (s*sqrt(c) * s*m*sqrt(Q)) = sqrt(c/Q).
    p = mismatch_partition(labels, num_classes=Q, classes_per_client=c, gamma=1, seed=1)
    s = p.stats(labels)
    assert s["cs"] == pytest.approx([math.sqrt(c / Q)] * 20, abs=1e-12)
    assert s["mean_cs"] == pytest.approx(math.sqrt(c / Q), abs=1e-12)


def test_mismatch_seven_classes_needs_divisible_total(labels):
    y7 = labels[labels < 7]
    with pytest.raises(PartitionError, match="multiple of num_classes=7"):
        mismatch_partition(y7, num_classes=7, classes_per_client=6, minority_classes=(0,), seed=0)
    p = mismatch_partition(y7, num_classes=7, classes_per_client=6, num_clients=14, minority_classes=(0,), seed=0)
    assert p.stats(y7)["mean_cs"] < 1


def test_monitor_scheme(labels):
    p = monitor_partition(labels, num_classes=Q, num_clients=100, samples_per_class=20, seed=2)
    assert_disjoint_sorted(p, labels.size)
    counts = np.array([counts_by_loop(labels, c) for c in p.clients])
    k = (counts > 0).sum(1)
    assert k.min() >= 1 and k.max() <= Q and len(set(k.tolist())) > 5
    assert np.array_equal(counts, (counts > 0) * 20)
    assert p == monitor_partition(labels, num_classes=Q, num_clients=100, samples_per_class=20, seed=2)
    assert p != monitor_partition(labels, num_classes=Q, num_clients=100, samples_per_class=20, seed=3)
    assert make_partition("monitor", labels, **p.params) == p


def test_monitor_lacking_samples_message():
    y = np.repeat(np.arange(3), [1000, 40, 1000])
    with pytest.raises(PartitionError, match=r"class 1 needs \d+ samples, has 40"):
        monitor_partition(y, num_classes=3, num_clients=30, samples_per_class=10, seed=0)


def writer_table(labels: np.ndarray, writers: np.ndarray) -> dict[int, list[int]]:
    table: dict[int, list[int]] = {}
    for i, w in enumerate(writers.tolist()):
        table.setdefault(w, []).append(i)
    return table


def test_writer_scheme_whole_writers(femnist):
    y, w = femnist
    p = writer_partition(y, w, num_classes=Q, num_clients=10, writers_per_client=5, seed=0)
    assert_disjoint_sorted(p, y.size)
    table = writer_table(y, w)
    used = set()
    for c in p.clients:
        ids = set(w[c].tolist())
        assert len(ids) == 5
        assert sorted(c.tolist()) == sorted(i for wid in ids for i in table[wid])
        used |= ids
    assert len(used) == 50
    assert sorted(unused_writers(p, w).tolist()) == sorted(set(table) - used)
    assert p == make_partition("writers", y, w, **p.params)
    assert p != writer_partition(y, w, num_classes=Q, num_clients=10, writers_per_client=5, seed=1)


@pytest.mark.parametrize("gamma", [10, 20, 50, 100])
def test_writer_scheme_thinning(femnist, gamma):
    y, w = femnist
    minority = (0, 1, 2)
    p = writer_partition(y, w, num_classes=Q, num_clients=10, writers_per_client=5, gamma=gamma,
                         minority_classes=minority, seed=4)
    assert_disjoint_sorted(p, y.size)
    table = writer_table(y, w)
    for c in p.clients:
        ids = set(w[c].tolist())  # every writer kept a class-9 sample
        assert len(ids) == 5
        full = [i for wid in ids for i in table[wid]]
        kept = set(c.tolist())
        assert kept <= set(full)
        assert {i for i in full if y[i] not in minority} <= kept
        for o in minority:
            n_full, n_kept = sum(y[i] == o for i in full), sum(y[i] == o for i in kept)
            assert n_kept <= n_full
    for o in minority:
        chosen = [i for c in p.clients for wid in set(w[c].tolist()) for i in table[wid]]
        n_o = sum(int(y[i] == o) for i in chosen)
        remaining = sum(int(y[i] == o) for c in p.clients for i in c.tolist())
        assert remaining == max(1, n_o // gamma)
        partial = 0
        for c in p.clients:
            full_o = sum(int(y[i] == o) for wid in set(w[c].tolist()) for i in table[wid])
            kept_o = int(np.sum(y[c] == o))
            partial += 0 < kept_o < full_o
        assert partial <= 1
    assert p == Partition.from_json(json.loads(json.dumps(p.to_json())))


def test_writer_scheme_errors(femnist):
    y, w = femnist
    with pytest.raises(PartitionError, match=r"needs 320 writers \(16 clients x 20\), 290 available"):
        writer_partition(y, w, num_classes=Q, num_clients=16, writers_per_client=20, seed=0,
                         exclude_writers=[1000 + 3 * i for i in range(10)])
    with pytest.raises(PartitionError, match="needs the writer id"):
        make_partition("writers", y, num_classes=Q, seed=0)
    with pytest.raises(ValueError, match="unknown partition scheme"):
        make_partition("dirichlet", y, num_classes=Q, seed=0)


def test_writer_scheme_excludes_writers(femnist):
    y, w = femnist
    reserved = [1000 + 3 * i for i in range(100)]
    p = writer_partition(y, w, num_classes=Q, num_clients=40, writers_per_client=5, seed=2, exclude_writers=reserved)
    used = set(w[p.pooled()].tolist())
    assert used.isdisjoint(reserved) and len(used) == 200
    assert set(unused_writers(p, w).tolist()) == set(reserved)


def test_writer_scheme_string_ids(femnist):
    y, w = femnist
    names = np.array([f"f{i:04d}_x" for i in w.tolist()])
    p = writer_partition(y, names, num_classes=Q, num_clients=4, writers_per_client=3, gamma=10,
                         minority_classes=(1,), seed=9, exclude_writers=["f1000_x"])
    q = writer_partition(y, w, num_classes=Q, num_clients=4, writers_per_client=3, gamma=10,
                         minority_classes=(1,), seed=9, exclude_writers=[1000])
    assert all(np.array_equal(a, b) for a, b in zip(p.clients, q.clients))
    assert "f1000_x" in unused_writers(p, names).tolist()
    assert p == Partition.from_json(json.loads(json.dumps(p.to_json())))


@pytest.mark.parametrize("seed", [None, -1, 1.5, True, "0"])
@pytest.mark.parametrize("scheme", ["monitor", "imbalance", "mismatch"])
def test_a_seed_that_does_not_fix_the_draw_is_refused(scheme: str, seed: object) -> None:
    """None would draw fresh entropy (a partition no one can rebuild); the others are numpy's TypeError or ValueError
    without the word seed. Every scheme says which input is wrong."""
    labels = np.repeat(np.arange(10), 600)
    extra = {"classes_per_client": 5, "majority_samples": 20} if scheme == "mismatch" else (
        {"majority_samples": 20} if scheme == "imbalance" else {"samples_per_class": 5})
    with pytest.raises(PartitionError, match=rf"seed must be a non-negative integer .*got {re.escape(repr(seed))}"):
        make_partition(scheme, labels, num_classes=10, seed=seed, **extra)
    first = make_partition(scheme, labels, num_classes=10, seed=np.int64(3), **extra)
    assert first == make_partition(scheme, labels, num_classes=10, seed=3, **extra)


def test_an_unknown_partition_parameter_is_named() -> None:
    labels = np.repeat(np.arange(10), 600)
    with pytest.raises(PartitionError, match=r"scheme 'imbalance' takes no parameter 'classes_per_clent'.*'min_classes'"):
        make_partition("imbalance", labels, num_classes=10, seed=0, classes_per_clent=3)
