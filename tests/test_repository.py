"""The repository stands alone: no file in it refers to a document outside it.

A fresh clone has nothing beside it, so a citation of a path outside the repository,
or a Markdown link that leaves it or points at a file it does not hold, is something
a reader cannot follow. The facts the outside documents held are restated in
docs/runtimes.md, docs/openai-checklist.md, docs/vllm-cpu.md and bench/README.md.

The files are the ones `git ls-files` lists (tracked, plus new files git does not
ignore); without git, or outside a git checkout, the files on disk minus what
.gitignore names.
"""

from __future__ import annotations

import fnmatch
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[1]
THIS_FILE = "tests/test_repository.py"  # it names the forbidden strings in order to find them

OUTSIDE_PATHS = ("../shared", "shared/reference", "shared/DESIGN")
OUTSIDE_DOCUMENTS = (
    "RUNTIMES.md",
    "DESIGN.md",
    "OPENAI_CONFORMANCE.md",
    "GATEWAYS.md",
    "ENGINES.md",
    "BENCHMARKS.md",
    "VLLM_CPU.md",
    "LLAMACPP.md",
    "SELECTION_AND_ROLLOUTS.md",
)

_FENCE = re.compile(r"^\s{0,3}(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
_INLINE_LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+[\"'(][^)]*)?\)")
_REFERENCE_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?")
_HTML_LINK = re.compile(r"""(?:href|src)\s*=\s*["']([^"']+)["']""")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


@dataclass(frozen=True, slots=True)
class Offence:
    path: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


@dataclass(frozen=True, slots=True)
class FileListing:
    files: tuple[str, ...]  # paths relative to the root, with forward slashes
    source: Literal["git", "disk"]


def repository_files(root: Path) -> FileListing:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return FileListing(files_on_disk(root), "disk")
    names = sorted({n for n in out.decode().split("\0") if n and (root / n).is_file()})
    return FileListing(tuple(names), "git")


def files_on_disk(root: Path) -> tuple[str, ...]:
    """Every file under root except .git and what .gitignore names (its patterns here
    are plain names, `dir/` for directories only, with * wildcards)."""
    patterns = _ignore_patterns(root / ".gitignore")
    found: list[str] = []
    for here, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != ".git" and not _ignored(d, patterns, is_dir=True))
        rel = Path(here).relative_to(root)
        found += [(rel / f).as_posix() for f in files if not _ignored(f, patterns, is_dir=False)]
    return tuple(sorted(found))


def _ignore_patterns(gitignore: Path) -> list[str]:
    if not gitignore.is_file():
        return []
    lines = (line.strip() for line in gitignore.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def _ignored(name: str, patterns: list[str], *, is_dir: bool) -> bool:
    for pattern in patterns:
        dir_only = pattern.endswith("/")
        if dir_only and not is_dir:
            continue
        if fnmatch.fnmatchcase(name, pattern.rstrip("/").lstrip("/")):
            return True
    return False


def scan(root: Path, listing: FileListing) -> list[Offence]:
    known = _known_paths(listing.files)
    offences: list[Offence] = []
    for path in listing.files:
        if path == THIS_FILE:
            continue
        text = _text_of(root / path)
        if text is None:
            continue
        offences += outside_citations(path, text)
        if path.endswith(".md"):
            offences += broken_links(path, text, known)
    return offences


def _known_paths(files: tuple[str, ...]) -> set[str]:
    known = set(files)
    for f in files:
        known.update(p.as_posix() for p in Path(f).parents)
    return known


def _text_of(path: Path) -> str | None:
    data = path.read_bytes()
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def outside_citations(path: str, text: str) -> list[Offence]:
    offences = []
    for number, line in enumerate(text.splitlines(), 1):
        for needle in OUTSIDE_PATHS:
            if needle in line:
                offences.append(Offence(path, number, f"names {needle!r}, a path outside the repository"))
        for needle in OUTSIDE_DOCUMENTS:
            if needle in line:
                offences.append(Offence(path, number, f"cites {needle!r}, a document outside the repository"))
    return offences


def markdown_links(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every link outside code blocks and code spans."""
    links: list[tuple[int, str]] = []
    in_fence = False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        prose = _CODE_SPAN.sub("", line)
        for pattern in (_INLINE_LINK, _REFERENCE_DEFINITION, _HTML_LINK):
            links += [(number, m.group(1)) for m in pattern.finditer(prose)]
    return links


def broken_links(path: str, text: str, known: set[str]) -> list[Offence]:
    offences = []
    for number, target in markdown_links(text):
        if target.startswith(("#", "//")) or _SCHEME.match(target):
            continue
        local = unquote(target.split("#", 1)[0].split("?", 1)[0])
        if not local:
            continue
        base = "" if local.startswith("/") else Path(path).parent.as_posix()
        resolved = os.path.normpath(os.path.join(base, local.lstrip("/")))
        if resolved == ".." or resolved.startswith("../") or os.path.isabs(resolved):
            offences.append(Offence(path, number, f"link {target!r} leaves the repository"))
        elif resolved != "." and resolved not in known:
            offences.append(Offence(path, number, f"link {target!r} points to a file the repository does not hold"))
    return offences


def test_no_file_refers_outside_the_repository():
    listing = repository_files(ROOT)
    assert {"README.md", THIS_FILE} <= set(listing.files), f"the {listing.source} listing misses the repository"
    offences = scan(ROOT, listing)
    assert not offences, (
        f"{len(offences)} reference(s) outside the repository ({listing.source} listing):\n"
        + "\n".join(map(str, offences))
    )


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_scanner_reports_every_file_and_line(tmp_path):
    _write(
        tmp_path,
        {
            "adapters/x.py": '"""Facts from\nRUNTIMES.md section 4."""\n',
            "scripts/run.sh": "# see ../shared/README.md\ncat shared/reference/ENGINES.md\n",
            "docs/there.md": "# There\n",
            "docs/guide.md": "\n".join(
                [
                    "[fine](there.md) and [fine too](../README.md#configuration) and [web](https://example.com)",
                    "[up and out](../../outside.md)",
                    "[gone](missing.md)",
                    "```",
                    "[not a link in code](nowhere.md) but shared/DESIGN is still named",
                    "```",
                    "`[not a link in a span](nowhere.md)` and [anchor](#there)",
                    "[ref]: /docs/absent.md",
                    '<img src="img/none.png">',
                ]
            ),
            "README.md": "# Root\n",
        },
    )
    listing = FileListing(files_on_disk(tmp_path), "disk")
    found = {(o.path, o.line, o.reason.split(" ", 1)[0], o.reason.split("'")[1]) for o in scan(tmp_path, listing)}
    assert found == {
        ("adapters/x.py", 2, "cites", "RUNTIMES.md"),
        ("scripts/run.sh", 1, "names", "../shared"),
        ("scripts/run.sh", 2, "names", "shared/reference"),
        ("scripts/run.sh", 2, "cites", "ENGINES.md"),
        ("docs/guide.md", 2, "link", "../../outside.md"),
        ("docs/guide.md", 3, "link", "missing.md"),
        ("docs/guide.md", 5, "names", "shared/DESIGN"),
        ("docs/guide.md", 8, "link", "/docs/absent.md"),
        ("docs/guide.md", 9, "link", "img/none.png"),
    }


def test_files_on_disk_leave_out_git_and_ignored_files(tmp_path):
    _write(
        tmp_path,
        {
            ".gitignore": "# built\n.venv/\n*.pyc\nreports/\nbuild/\n",
            ".git/config": "",
            ".venv/bin/python": "",
            "pkg/mod.py": "",
            "pkg/mod.pyc": "",
            "reports/run.json": "",
            "docs/build": "a file named like an ignored directory stays",
            "README.md": "",
        },
    )
    assert files_on_disk(tmp_path) == (".gitignore", "README.md", "docs/build", "pkg/mod.py")


def test_without_git_the_files_on_disk_are_scanned(tmp_path, monkeypatch):
    _write(tmp_path, {"README.md": "See [the design](../shared/DESIGN.md).\n", "tests/t.py": "x = 1\n"})
    monkeypatch.setenv("PATH", str(tmp_path / "no-git-here"))
    listing = repository_files(tmp_path)
    assert listing == FileListing(("README.md", "tests/t.py"), "disk")
    assert [str(o) for o in scan(tmp_path, listing)] == [
        "README.md:1: names '../shared', a path outside the repository",
        "README.md:1: names 'shared/DESIGN', a path outside the repository",
        "README.md:1: cites 'DESIGN.md', a document outside the repository",
        "README.md:1: link '../shared/DESIGN.md' leaves the repository",
    ]
