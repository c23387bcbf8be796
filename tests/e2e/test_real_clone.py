"""A real clone as the user has it: `repo.path`, remote refs, `--fetch` of a pull-request head.

The "upstream" is a bare copy of the fixture repository with one more commit
published as `refs/pull/7/head`, as GitHub publishes pull requests; the user's
clone does not have that ref until `--fetch`.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import git
import pytest
import yaml

from difftest.build.refs import read_blob
from difftest.build.workspace import prepare
from difftest.cli import main
from difftest.core.config import load_config
from tests.factories import ROOT

pytestmark = pytest.mark.slow

VERSION_FILE = "vllm/_version.py"


@pytest.fixture
def clone(tmp_path, fixture_repo) -> Path:
    upstream = tmp_path / "upstream.git"
    git.Repo.clone_from(fixture_repo.git_dir, upstream, bare=True)
    work = git.Repo.clone_from(upstream, tmp_path / "contributor")
    target = Path(work.working_dir) / VERSION_FILE
    text = read_blob(fixture_repo, "v0.32.0", VERSION_FILE).decode()
    target.write_text(text.replace("'0.32.0'", "'0.32.0+pr7'", 1))
    work.index.add([VERSION_FILE])
    someone = git.Actor("Contributor", "contributor@example.invalid")
    work.index.commit("pr 7: bump the version string", author=someone, committer=someone)
    work.git.push("origin", "HEAD:refs/pull/7/head")
    user = git.Repo.clone_from(upstream, tmp_path / "vllm")
    return Path(user.working_dir)


def write_config(tmp_path: Path, clone: Path, branches: list[dict]) -> Path:
    raw = yaml.safe_load((ROOT / "branches.yaml").read_text())
    raw.update(
        repo={"path": str(clone), "base_ref": "v0.32.0"},
        branches=branches,
        baseline=branches[0]["name"],
    )
    path = tmp_path / "real.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_pull_request_head_needs_fetch_then_builds_its_code(tmp_path, clone, capsys):
    config = write_config(
        tmp_path,
        clone,
        [{"name": "upstream", "ref": "origin/main"}, {"name": "pr7", "ref": "pull/7/head"}],
    )
    assert (
        main(["envs", "--build", "-c", str(config)]) == 2
    )  # not fetched yet: a clear error, nothing built
    assert "pull/7/head" in capsys.readouterr().err
    assert main(["envs", "--build", "--fetch", "-c", str(config)]) == 0
    # The listing is what this config uses (the base and its two branches' environments; upstream's
    # may carry the name of whichever branch first built the same code), not the whole cache.
    listing = capsys.readouterr().out
    rows = [line for line in listing.splitlines() if "│ branch │" in line or "│ base " in line]
    assert len(rows) == 3 and "pr7 @" in listing, listing
    workspace = prepare(load_config(config))
    pr7 = workspace.branch("pr7")
    assert pr7.resolved.sha == git.Repo(clone).commit("refs/pull/7/head").hexsha
    version = subprocess.run(
        [str(pr7.env.python), "-c", "import vllm; print(vllm.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert version == "0.32.0+pr7"
    assert workspace.branch("upstream").env.fingerprint["changed_files"] == []


def test_a_path_that_is_not_a_repository_exits_2(tmp_path, capsys):
    (tmp_path / "plain-folder").mkdir()
    config = write_config(tmp_path, tmp_path / "plain-folder", [{"name": "main", "ref": "main"}])
    assert main(["envs", "--build", "-c", str(config)]) == 2
    assert "not a git repository" in capsys.readouterr().err.lower()


def test_a_typo_in_a_ref_exits_2_before_the_base_is_built(tmp_path, clone, monkeypatch, capsys):
    """With a real clone, refs are resolved first: a typo costs seconds, not a base build."""
    home = tmp_path / "empty-home"
    monkeypatch.setenv("DIFFTEST_HOME", str(home))
    config = write_config(tmp_path, clone, [{"name": "upstream", "ref": "origin/mian"}])
    assert main(["run", "-c", str(config), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "origin/mian" in err and "did you mean 'origin/main'?" in err  # #34, case 2
    assert not list((home / "envs").glob("base-*"))


# -- pull requests on a later main: transplanted onto the wheel's tag
# ---------------------------------

PULLS = {56137: "pr-56137-style.patch", 56195: "pr-56195-style.patch"}


@pytest.fixture(scope="session")
def later_main(tmp_path_factory, fixture_repo) -> Path:
    """An upstream whose `main` moved past v0.32.0 (a Python commit outside the stats path, then a
    native-code commit), with the two #56101 approaches as pull requests off that later main."""
    root = tmp_path_factory.mktemp("later-main")
    upstream = root / "upstream.git"
    git.Repo.clone_from(fixture_repo.git_dir, upstream, bare=True)
    work = git.Repo.clone_from(upstream, root / "maintainer")
    someone = git.Actor("Maintainer", "maintainer@example.invalid")

    def commit(message: str, files: dict[str, str]) -> None:
        for rel, text in files.items():
            target = Path(work.working_dir) / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        work.index.add(list(files))
        work.index.commit(message, author=someone, committer=someone)

    envs = read_blob(fixture_repo, "v0.32.0", "vllm/envs.py").decode()
    commit(
        "envs: a later Python change outside the stats path",
        {"vllm/envs.py": envs + "\n# later main\n"},
    )
    commit(
        "csrc: a later kernel change",
        {"csrc/later_kernel.cu": "// compiled code the release wheel lacks\n"},
    )
    work.git.push("origin", "HEAD:main")
    for number, patch in PULLS.items():
        work.git.checkout("-q", "-b", f"pr-{number}", "origin/main")
        work.git.apply(str(ROOT / "patches" / patch))
        work.git.add("-A")
        work.index.commit(
            f"#{number}: fix the mean acceptance length", author=someone, committer=someone
        )
        work.git.push("origin", f"HEAD:refs/pull/{number}/head")
    user = git.Repo.clone_from(upstream, root / "vllm")
    return Path(user.working_dir)


def transplant_config(tmp_path: Path, clone: Path, extra: list[dict] | None = None) -> Path:
    """What the README recommends for a real clone: the release tag as baseline, PR heads
    transplanted."""
    path = write_config(
        tmp_path,
        clone,
        [
            {"name": "release", "ref": "v0.32.0"},
            {"name": "main", "ref": "origin/main"},
            *({"name": f"pr-{n}", "ref": f"pull/{n}/head", "transplant": True} for n in PULLS),
            *(extra or []),
        ],
    )
    raw = yaml.safe_load(path.read_text())
    raw["repo"]["mainline"] = "origin/main"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_pull_requests_on_a_later_main_are_transplanted_onto_the_release(
    tmp_path, later_main, capsys
):
    config = transplant_config(tmp_path, later_main)
    out = tmp_path / "out"
    code = main(
        [
            "run",
            "--fetch",
            "-c",
            str(config),
            "--tier",
            "scheduler",
            "-k",
            "mixed-batch",
            "--out",
            str(out),
        ]
    )
    assert code == 1, capsys.readouterr().err
    evidence = json.loads((out / "evidence.json").read_text())
    verdicts = {}
    for r in evidence["results"]:
        verdicts.setdefault(r["branch"], set()).add(r["verdict"])
    # `ref: main` carries the later kernel change: refused, and says why.
    assert verdicts["main"] == {"error"}
    assert all(
        "native code" in r["error"] and "csrc/later_kernel.cu" in r["error"]
        for r in evidence["results"]
        if r["branch"] == "main"
    )
    # Transplanted, the PRs tell the known story against the release they now differ from by their
    # own commit.
    assert (
        "broken" in verdicts["pr-56195"]
        and "broken" not in verdicts["pr-56137"] | verdicts["release"]
    )
    user = git.Repo(later_main)
    tag, mainline = user.commit("v0.32.0").hexsha, user.commit("origin/main").hexsha
    for number in PULLS:
        branch = evidence["branches"][f"pr-{number}"]
        (moved,) = branch["transplants"]
        head = user.commit(f"refs/pull/{number}/head").hexsha
        assert (moved["original_sha"], moved["merge_base"], moved["onto_sha"]) == (
            head,
            mainline,
            tag,
        )
        assert [c["original"] for c in moved["replayed"]] == [head] and moved["replayed"][-1][
            "sha"
        ] == branch["sha"]
        assert (
            branch["ref_sha"] == tag and branch["fingerprint"]["changed_files"]
        )  # only the PR's own files
        assert not any(
            "envs.py" in f or "csrc" in f for f in branch["fingerprint"]["changed_files"]
        )
    # A reviewer re-runs the transplanted branches from the evidence alone.
    assert (
        main(
            [
                "verify",
                "-c",
                str(config),
                str(out / "evidence.json"),
                "--out",
                str(tmp_path / "again"),
            ]
        )
        == 0
    )


def test_a_native_commit_inside_a_transplanted_branch_is_refused(tmp_path, later_main):
    user = git.Repo(later_main)
    user.git.checkout("-q", "-b", "pr-native", "origin/main")
    kernel = Path(later_main) / "csrc" / "pr_kernel.cu"
    kernel.write_text("// the PR's own kernel\n")
    user.index.add([str(kernel.relative_to(later_main))])
    someone = git.Actor("Contributor", "contributor@example.invalid")
    user.index.commit("pr: a kernel", author=someone, committer=someone)
    user.git.checkout("-q", "main")
    config = transplant_config(
        tmp_path, later_main, [{"name": "pr-native", "ref": "pr-native", "transplant": True}]
    )
    workspace = prepare(load_config(config), ["pr-native"])
    branch = workspace.branch("pr-native")
    assert (
        branch.env is None and "csrc/pr_kernel.cu" in branch.error and "native code" in branch.error
    )
