"""scripts/gpu_wheels.py: which packages a GPU machine without Snakemake is sent, and pulp's wheel cut to one
platform's solver (no network: the closure is drawn from made-up distributions, the wheel is made here)."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata as metadata
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import load_script

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def gw():
    return load_script("scripts/gpu_wheels.py")


def _dists(table: dict[str, tuple[str, list[str]]]):
    def distribution(name: str):
        key = name.lower().replace("_", "-")
        if key not in table:
            raise metadata.PackageNotFoundError(name)
        version, requires = table[key]
        return SimpleNamespace(version=version, requires=requires)
    return distribution


TABLE = {
    "fedbalance": ("0.1", ["snakemake>=9,<10", "torch>=2.3,<2.15", "numpy>=1.24", "pytest; extra == 'test'"]),
    "snakemake": ("9.1", ["packaging<26,>=24", "Jinja2<4.0,>=3.0", "pulp", "tabulate",
                          "colorama; sys_platform == 'win32'"]),
    "jinja2": ("3.1.6", ["MarkupSafe>=2.0"]),
    "markupsafe": ("3.0", []),
    "torch": ("2.14.1", ["nvidia-cublas==13.1; platform_system == 'Linux'", "filelock"]),
    "nvidia-cublas": ("13.1", []),
    "filelock": ("4.3", []),
    "numpy": ("2.4", []),
    "scipy": ("1.17", ["numpy<2.7,>=1.25"]),
    "packaging": ("25.0", []),
    "pulp": ("3.3", []),
    "tabulate": ("0.10", []),
    "pytest": ("9", []),
    "colorama": ("0.4", []),
}


def test_the_closure_follows_requirements_and_their_markers_and_records_upper_bounds(gw) -> None:
    versions, bounds = gw.requirement_closure(["fedbalance"], _dists(TABLE))
    # by hand: extras and another platform's markers are not followed; scipy is required by nothing here
    assert versions == {"fedbalance": "0.1", "snakemake": "9.1", "torch": "2.14.1", "numpy": "2.4",
                        "packaging": "25.0", "jinja2": "3.1.6", "markupsafe": "3.0", "pulp": "3.3",
                        "tabulate": "0.10", "nvidia-cublas": "13.1", "filelock": "4.3"}
    assert bounds == {"snakemake": {"fedbalance"}, "torch": {"fedbalance"}, "packaging": {"snakemake"},
                      "jinja2": {"snakemake"}, "nvidia-cublas": {"torch"}}


def test_what_is_carried_is_what_the_image_lacks_and_what_a_carried_package_bounds(gw) -> None:
    versions, bounds = gw.requirement_closure(["fedbalance", "scipy"], _dists(TABLE))
    image = frozenset({"packaging", "jinja2", "markupsafe", "tabulate", "numpy", "scipy", "torch", "filelock"})
    carry = gw.to_carry(versions, bounds, image)
    # snakemake and pulp: not in the image; packaging and jinja2: in it, but bounded by snakemake (carried);
    # numpy: bounded only by scipy, which the image holds; torch and nvidia-*: the accelerator stack, bounded or not;
    # markupsafe: required by jinja2 with no upper bound; fedbalance: the checkout
    assert carry == {"jinja2": "3.1.6", "packaging": "25.0", "pulp": "3.3", "snakemake": "9.1"}


def test_bounds_carry_packages_through_chains_of_carried_requirers(gw) -> None:
    table = {"a": ("1", ["b<2"]), "b": ("1.5", ["c~=1.0"]), "c": ("1.0.3", ["d<9"]), "d": ("8", [])}
    carry = gw.to_carry(*gw.requirement_closure(["a"], _dists(table)), frozenset({"b", "c"}))
    assert carry == {"a": "1", "b": "1.5", "c": "1.0.3", "d": "8"}   # d: not in the image; b through a, c through b


def test_pulps_wheel_keeps_one_solver_and_a_record_that_matches_it(gw, tmp_path: Path) -> None:
    wheel = tmp_path / "pulp-3.3.2-py3-none-any.whl"
    members = {"pulp/__init__.py": b"SOLVER = 'cbc'\n", "pulp/solverdir/cbc/linux/i64/cbc": b"\x7fELF-x86" * 50,
               "pulp/solverdir/cbc/linux/arm64/cbc": b"\x7fELF-arm" * 900,
               "pulp/solverdir/cbc/win/i64/cbc.exe": b"MZ" * 2000, "pulp/solverdir/cbc/osx/i64/cbc": b"\xcf\xfa" * 1500,
               "pulp/tests/test_pulp.py": b"x = 1\n",
               "pulp-3.3.2.dist-info/METADATA": b"Metadata-Version: 2.1\nName: pulp\nVersion: 3.3.2\n",
               "pulp-3.3.2.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as whl:
        for name, data in members.items():
            whl.writestr(name, data)
        record = "".join(f"{name},,\n" for name in members) + "pulp-3.3.2.dist-info/RECORD,,\n"
        whl.writestr("pulp-3.3.2.dist-info/RECORD", record)
    size = wheel.stat().st_size
    saved = gw.strip_wheel(wheel, gw.pulp_drop)
    assert saved == size - wheel.stat().st_size > 1800 * 4
    kept = ["pulp/__init__.py", "pulp/solverdir/cbc/linux/i64/cbc", "pulp-3.3.2.dist-info/METADATA",
            "pulp-3.3.2.dist-info/WHEEL"]
    with zipfile.ZipFile(wheel) as whl:
        assert sorted(whl.namelist()) == sorted(kept + ["pulp-3.3.2.dist-info/RECORD"])
        record = whl.read("pulp-3.3.2.dist-info/RECORD").decode().splitlines()
    expected = []
    for name in kept:
        digest = base64.urlsafe_b64encode(hashlib.sha256(members[name]).digest()).rstrip(b"=").decode()
        expected.append(f"{name},sha256={digest},{len(members[name])}")
    assert sorted(record) == sorted(expected + ["pulp-3.3.2.dist-info/RECORD,,"])
    # pip takes the cut wheel (offline: a local file, no dependencies)
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", str(site),
                    str(wheel)], check=True, capture_output=True)
    assert (site / "pulp" / "solverdir" / "cbc" / "linux" / "i64" / "cbc").read_bytes() == members[
        "pulp/solverdir/cbc/linux/i64/cbc"]
    assert not (site / "pulp" / "solverdir" / "cbc" / "win").exists()
