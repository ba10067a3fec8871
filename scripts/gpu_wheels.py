"""The wheels that scripts/gpu_session.sh carries to a GPU machine whose image lacks Snakemake (into ``.whl/``).

    python scripts/gpu_wheels.py [--dest .whl] [--python-version 3.12] [--dry-run]

What is carried: the requirement closure of the library (Snakemake and mlxtend among it) at the versions this
environment has installed (those this checkout is tested with), less what the device image holds (``DEVICE_IMAGE``,
the package list of /work/.library/device/KINDS.md), except that a package which a carried one bounds from above
(snakemake's ``packaging<26``, ``jinja2<4``) is carried anyway, its version there being unknown; the accelerator
stack (torch, torchvision, triton, CUDA's packages) is never carried. Each is downloaded as a wheel for CPython
PYTHON_VERSION on manylinux x86-64, or built here from its sdist where PyPI has no wheel (connection-pool: pure
Python). pulp's wheel keeps only its linux x86-64 CBC solver: the other platforms' solvers are 28 MB of the 64 MiB a
device call carries. Prints a JSON summary (the wheels, their bytes); exit status 1 when a package got no wheel.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import importlib.metadata as metadata
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path

from packaging.requirements import Requirement

ROOTS = ("fedbalance",)
"""The closure's roots: the library, whose requirements name Snakemake, mlxtend and all the workflow imports."""
CHECKOUT = {"fedbalance"}
"""Travels as the checkout (PYTHONPATH=src), not as a wheel."""
ACCELERATOR = re.compile(r"^(torch|torchvision|torchaudio|triton|nvidia-.*|cuda-.*)$")
"""The device image's own accelerator builds: never replaced."""
DEVICE_IMAGE = frozenset("""
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools
formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna
imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe
matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals
networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13
nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft
pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist
python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers
statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm
tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope
triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl
zipp
""".split())
"""The nvidia-h200 image's packages (KINDS.md, as read on 2026-11-17)."""
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64")
PULP_KEEP = "pulp/solverdir/cbc/linux/i64/"
"""The one CBC solver of pulp's wheel that an x86-64 Linux machine runs."""


def normalise(name: str) -> str:
    """A distribution's name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_closure(roots: Iterable[str], distribution: Callable[[str], metadata.Distribution]
                        = metadata.distribution) -> tuple[dict[str, str], dict[str, set[str]]]:
    """Every installed distribution the roots require (markers evaluated without extras): name → version, and for
    each name bounded from above by a requirement (``<``, ``<=``, ``==``, ``~=``), the distributions that bound it."""
    versions: dict[str, str] = {}
    bounds: dict[str, set[str]] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        key = normalise(name)
        if key in versions:
            continue
        try:
            dist = distribution(name)
        except metadata.PackageNotFoundError:
            continue
        versions[key] = dist.version
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            if any(spec.operator in ("<", "<=", "==", "~=", "===") for spec in req.specifier):
                bounds.setdefault(normalise(req.name), set()).add(key)
            todo.append(req.name)
    return versions, bounds


def to_carry(versions: dict[str, str], bounds: dict[str, set[str]], image: frozenset[str] = DEVICE_IMAGE
             ) -> dict[str, str]:
    """The closure less the checkout and the accelerator stack: what the image lacks, and what it holds but a
    carried distribution bounds from above (its version there being unknown), until nothing more is added."""
    eligible = {name for name in versions if name not in CHECKOUT and not ACCELERATOR.match(name)}
    carry = {name for name in eligible if name not in image}
    while more := {name for name in eligible - carry if bounds.get(name, set()) & carry}:
        carry |= more
    return {name: versions[name] for name in sorted(carry)}


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def strip_wheel(wheel: Path, drop: Callable[[str], bool]) -> int:
    """Rewrites ``wheel`` without the members ``drop`` names, its RECORD listing the rest; returns the bytes saved."""
    before = wheel.stat().st_size
    tmp = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out:
        members = [info for info in src.infolist() if not drop(info.filename)]
        record = next((m for m in members if m.filename.endswith(".dist-info/RECORD")), None)
        lines = []
        for info in members:
            if info is record:
                continue
            data = src.read(info)
            out.writestr(info, data)
            lines.append(f"{info.filename},{_record_hash(data)},{len(data)}")
        if record is not None:
            lines.append(f"{record.filename},,")
            out.writestr(record, "\n".join(lines) + "\n")
    tmp.replace(wheel)
    return before - wheel.stat().st_size


def pulp_drop(member: str) -> bool:
    """pulp's members that no x86-64 Linux machine needs: the other CBC builds and the tests."""
    if member.startswith("pulp/tests/"):
        return True
    return member.startswith("pulp/solverdir/cbc/") and not member.startswith(PULP_KEEP)


def fetch(name: str, version: str, dest: Path, python_version: str) -> Path | None:
    """The wheel of name==version for CPython python_version on manylinux x86-64, else one built from its sdist
    (accepted only when pure Python: ``py3-none-any``)."""
    with tempfile.TemporaryDirectory() as tmp:
        platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
               python_version, "--implementation", "cp", *platforms, "-d", tmp, f"{name}=={version}"]
        from_sdist = subprocess.run(cmd, capture_output=True).returncode != 0
        if from_sdist:
            cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp, f"{name}=={version}"]
            if subprocess.run(cmd, capture_output=True).returncode != 0:
                return None
        built = sorted(Path(tmp).glob("*.whl"))
        if len(built) != 1 or (from_sdist and not built[0].name.endswith("-py3-none-any.whl")):
            return None
        target = dest / built[0].name
        target.write_bytes(built[0].read_bytes())
        return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", type=Path, default=Path(".whl"))
    parser.add_argument("--python-version", default="3.12", help="the device's Python (KINDS.md: 3.12)")
    parser.add_argument("--dry-run", action="store_true", help="print what would be carried; fetch nothing")
    args = parser.parse_args(argv)
    carry = to_carry(*requirement_closure(ROOTS))
    if args.dry_run:
        print(json.dumps({"carry": carry}, indent=1))
        return 0
    args.dest.mkdir(parents=True, exist_ok=True)
    for old in args.dest.glob("*.whl"):
        old.unlink()
    wheels, missing = {}, []
    for name, version in carry.items():
        wheel = fetch(name, version, args.dest, args.python_version)
        if wheel is None:
            missing.append(f"{name}=={version}")
            continue
        if name == "pulp":
            strip_wheel(wheel, pulp_drop)
        wheels[wheel.name] = wheel.stat().st_size
    print(json.dumps({"dest": str(args.dest), "wheels": wheels, "bytes": sum(wheels.values()), "missing": missing},
                     indent=1))
    if missing:
        print(f"FAILED: no wheel for {', '.join(missing)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
