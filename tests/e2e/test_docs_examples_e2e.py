"""Every example of README.md and docs/ marked `<!-- example: runs -->` runs as written: page by
page, its blocks in order, in a reader's working folder (with `.venv` there, as in a clone)
against a real server on free ports (the blocks' 127.0.0.1:8000 and :8001 are its ports).

A page that starts from the README's first model gets model.pte as the README's own export block
writes it, deployed as `mymodel`. tests/unit/test_docs_site.py checks that every shell and Python
block is marked, so an example cannot be left out of this test unnoticed.
"""

import os
import shutil
import sys
from pathlib import Path

import pytest

from support import doc_examples
from support.server import REPO, upload

RUNNABLE = [p for p in doc_examples.pages() if any(b.runs for b in doc_examples.blocks(p))]


@pytest.fixture(scope="module")
def first_model(tmp_path_factory) -> Path:
    """model.pte exported by the README's export block, as a reader of "Your first model" has it."""
    folder = tmp_path_factory.mktemp("first-model")
    readme = doc_examples.blocks(REPO / "README.md")
    export = next(b for b in readme if b.runs and b.language == "python")
    done = doc_examples.run(
        export, folder, 0, 0, doc_examples.reader_env(os.environ, ""), sys.executable
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return folder / "model.pte"


def test_every_page_with_examples_is_run():
    assert {doc_examples.shown(p) for p in RUNNABLE} >= {"README.md", "docs/getting-started.md"}


@pytest.mark.parametrize("page", RUNNABLE, ids=doc_examples.shown)
def test_the_examples_run_as_written(page, tmp_path, start_server, request):
    server = start_server(*doc_examples.server_args(page))
    reader = tmp_path / "reader"
    reader.mkdir()
    (reader / ".venv").symlink_to(Path(sys.executable).parent.parent)
    if doc_examples.setup(page) == "first-model":
        shutil.copy(request.getfixturevalue("first_model"), reader / "model.pte")
        with server.client() as client:
            assert upload(client, "mymodel", reader / "model.pte").status_code == 201
    env = doc_examples.reader_env(os.environ, server.url)
    for block in doc_examples.blocks(page):
        if not block.runs:
            continue
        done = doc_examples.run(block, reader, server.port, server.grpc_port, env, sys.executable)
        assert done.returncode == 0, (
            f"{block.where} exited {done.returncode}\n--- stdout\n{done.stdout[-3000:]}"
            f"\n--- stderr\n{done.stderr[-3000:]}\n--- server log\n{server.log()[-2000:]}"
        )
