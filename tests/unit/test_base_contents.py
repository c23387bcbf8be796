"""A change to the base's `vllm/` is found by content (`build.envs.contents`), even one made in
place with the size, mtime and bytecode kept; a real folder and real files stand in for the base's
2.5 GB (the check reads nothing else)."""

from __future__ import annotations

import os
from pathlib import Path

from difftest.build.envs.contents import changed_contents, record_contents


def make_base(root: Path) -> Path:
    vllm = root / "lib" / "site-packages" / "vllm"
    (vllm / "v1" / "__pycache__").mkdir(parents=True)
    (vllm / "v1" / "metrics.py").write_text("self.num_drafts += 1\n")
    (vllm / "v1" / "__pycache__" / "metrics.cpython-311.pyc").write_bytes(b"\x00code-1")
    (vllm / "_C.so").write_bytes(b"\x7fELF" + b"\x00" * 64)
    record_contents(root, vllm)
    return vllm


def rewrite_in_place(path: Path, data: bytes) -> None:
    """As a hostile branch would: the same inode, size and mtime."""
    st = path.stat()
    assert len(data) == st.st_size
    with open(path, "r+b") as stream:
        stream.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_ino == st.st_ino and path.stat().st_mtime_ns == st.st_mtime_ns


def test_an_untouched_base_is_intact_and_checked_again_cheaply(tmp_path):
    vllm = make_base(tmp_path)
    assert changed_contents(tmp_path, vllm) is None
    assert changed_contents(tmp_path, vllm) is None


def test_a_source_rewritten_in_place_with_size_and_mtime_kept_is_found(tmp_path):
    vllm = make_base(tmp_path)
    assert changed_contents(tmp_path, vllm) is None  # remembered as intact first
    rewrite_in_place(vllm / "v1" / "metrics.py", b"self.num_drafts += 2\n")
    problem = changed_contents(tmp_path, vllm)
    assert problem and "vllm/v1/metrics.py" in problem and "content differs" in problem


def test_bytecode_rewritten_in_place_is_found(tmp_path):
    vllm = make_base(tmp_path)
    rewrite_in_place(vllm / "v1" / "__pycache__" / "metrics.cpython-311.pyc", b"\x00code-2")
    assert "metrics.cpython-311.pyc" in (changed_contents(tmp_path, vllm) or "")


def test_added_removed_and_resized_files_are_found(tmp_path):
    vllm = make_base(tmp_path)
    (vllm / "v1" / "sitecustomize.py").write_text("")
    assert "was added" in (changed_contents(tmp_path, vllm) or "")
    (vllm / "v1" / "sitecustomize.py").unlink()
    (vllm / "v1" / "metrics.py").unlink()
    assert "vllm/v1/metrics.py is missing" == changed_contents(tmp_path, vllm)
    vllm = make_base(tmp_path / "again")
    (vllm / "_C.so").write_bytes(b"\x7fELF")
    assert "vllm/_C.so" in (changed_contents(tmp_path / "again", vllm) or "")


def test_a_base_without_its_record_is_not_trusted(tmp_path):
    vllm = make_base(tmp_path)
    (tmp_path / "vllm-contents.json").unlink()
    assert "vllm-contents.json" in (changed_contents(tmp_path, vllm) or "")


def test_a_file_replaced_by_a_link_a_folder_or_a_fifo_is_found_and_never_blocks(tmp_path):
    """Read without following links or waiting on a FIFO (a hostile branch's trap)."""
    for kind in ("link", "folder", "fifo"):
        vllm = make_base(tmp_path / kind)
        target = vllm / "v1" / "metrics.py"
        copy = tmp_path / f"{kind}-copy.py"
        copy.write_bytes(target.read_bytes())
        target.unlink()
        if kind == "link":
            target.symlink_to(copy)
        elif kind == "folder":
            target.mkdir()
        else:
            os.mkfifo(target)
        problem = changed_contents(tmp_path / kind, vllm) or ""
        assert "vllm/v1/metrics.py" in problem, (kind, problem)
