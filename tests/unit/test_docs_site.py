"""The documentation: the README stays a first day's read, its links and the docs site's hold
(`mkdocs build --strict`, offline, fails on a broken link or a page left out of the nav), and
every shell or Python example says whether CI runs it (tests/e2e/test_docs_examples_e2e.py runs
the ones that do)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from support import doc_examples
from support.server import REPO

pytestmark = pytest.mark.slow  # two site builds, seconds each


def _build(root: Path, site: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "mkdocs", "build", "--strict"]
    return subprocess.run(
        [*command, "-f", str(root / "mkdocs.yml"), "-d", str(site)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


def test_the_site_builds_strictly(tmp_path):
    built = _build(REPO, tmp_path / "site")
    assert built.returncode == 0, built.stdout + built.stderr
    assert (tmp_path / "site" / "getting-started" / "index.html").exists()


def test_a_broken_link_fails_the_build(tmp_path):
    shutil.copytree(REPO / "docs", tmp_path / "docs")
    shutil.copy(REPO / "mkdocs.yml", tmp_path / "mkdocs.yml")
    page = tmp_path / "docs" / "index.md"
    page.write_text(page.read_text() + "\nSee [nowhere](no-such-page.md).\n")
    built = _build(tmp_path, tmp_path / "site")
    assert built.returncode != 0 and "no-such-page.md" in built.stdout + built.stderr


def _nav_pages(nav) -> set[str]:
    pages = set()
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages |= _nav_pages(value) if isinstance(value, list) else {value}
    return pages


def test_every_page_is_in_the_nav():
    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]
    pages = {str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").rglob("*.md")}
    assert pages - _nav_pages(nav) == set(), "add these pages to mkdocs.yml's nav"


def test_the_readme_is_a_first_days_read_and_its_links_hold():
    text = (REPO / "README.md").read_text()
    assert text.count("\n") <= 250
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if not target.startswith(("http://", "https://")):
            assert (REPO / target).exists(), target


def test_every_program_block_says_whether_it_runs():
    problems = [p for page in doc_examples.pages() for p in doc_examples.problems(page)]
    assert problems == []


def test_the_marker_check_finds_what_it_must(tmp_path):
    page = tmp_path / "probe.md"
    page.write_text(
        "```sh\nunmarked\n```\n\n<!-- example: not run: because -->\n```json\n{}\n```\n\n"
        "```\nno language\n```\n\nText.\n\n    curl http://x\n"
    )
    found = doc_examples.problems(page)
    assert len(found) == 4, found
    assert any("without `<!-- example: runs -->`" in p for p in found)
    assert any("marker on a json block" in p for p in found)
    assert any("fence without a language" in p for p in found)
    assert any("indented block" in p for p in found)


def test_the_export_environment_the_docs_create_is_ignored():
    """The docs create .venv-export inside the clone (torch: GBs): never committed, never sent
    to an image build."""
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", ".venv-export/bin/python"], cwd=REPO, timeout=30
    )
    assert ignored.returncode == 0
    patterns = (REPO / ".dockerignore").read_text().split("\n")
    assert ".venv-export" in patterns and "**/.venv-export" in patterns
