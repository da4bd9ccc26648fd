"""The images' build inputs: the build context is an allowlist (.dockerignore lets in
exactly what the Dockerfiles COPY, so a 1.7 GB .venv or .git is never sent), and
every base image is pinned by digest, so that a rebuild starts from the same bytes."""

from __future__ import annotations

import fnmatch
import re

import pytest

from tests.charts.dockerfile import ENGINE_DOCKERFILE, GATEWAY_DOCKERFILE, ROOT, instructions

IMAGES = {"gateway": GATEWAY_DOCKERFILE, "engine": ENGINE_DOCKERFILE}
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def dockerignore_rules() -> list[tuple[bool, str]]:
    """(excludes, pattern) in order, as Docker reads .dockerignore."""
    rules = []
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            rules.append((not line.startswith("!"), line.lstrip("!").rstrip("/")))
    return rules


def sent(path: str, rules: list[tuple[bool, str]]) -> bool:
    """Whether `path` is in the build context: the last rule matching it or a folder above it wins."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    included = True
    for excludes, pattern in rules:
        if any(fnmatch.fnmatchcase(p, pattern) for p in prefixes) or (
            pattern.startswith("**/") and any(fnmatch.fnmatchcase(part, pattern[3:]) for part in parts)
        ):
            included = not excludes
    return included


@pytest.mark.parametrize("image", list(IMAGES))
def test_the_context_holds_what_the_dockerfile_copies(image):
    rules = dockerignore_rules()
    assert rules[0] == (True, "*"), "an allowlist starts by leaving everything out"
    sources = [
        i.value.split()[0] for i in instructions(IMAGES[image]) if i.keyword == "COPY" and "--from" not in i.value
    ]
    assert sources and all(sent(s if "." in s.rsplit("/", 1)[-1] else s + "/x.py", rules) for s in sources), sources


def test_the_context_leaves_out_the_venv_git_tests_and_caches():
    rules = dockerignore_rules()
    for path in (
        ".venv/bin/python",
        ".git/HEAD",
        "tests/conftest.py",
        "charts/switchyard/values.yaml",
        "gateway/__pycache__/app.cpython-311.pyc",
        "docs/operations.md",
        "bench-results/r.json",
    ):
        assert not sent(path, rules), path
    assert sent("gateway/app.py", rules) and sent("docker/engine.yaml", rules)


@pytest.mark.parametrize("image", list(IMAGES))
def test_base_images_are_pinned_by_digest(image):
    steps = instructions(IMAGES[image])
    args = dict(i.value.split("=", 1) for i in steps if i.keyword == "ARG" and "=" in i.value)
    bases = [i.value.split()[0] for i in steps if i.keyword == "FROM"]
    for base in bases:
        resolved = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), base)
        assert DIGEST.search(resolved), f"{image}: FROM {base} -> {resolved} is not pinned by digest"
