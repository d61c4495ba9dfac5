"""A model repository laid out as --model-dir reads it (good entries, a refused one, a folder
that is no model), read-only, and what 'unchanged' means for it: shared by the server's and the
embedded engine's tests."""

import hashlib
import json
import shutil


def snapshot(root):
    """Every path under root with its bytes' digest and mode: what 'unchanged' means."""
    return {
        str(p.relative_to(root)): (
            p.stat().st_mode,
            hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None,
        )
        for p in sorted(root.rglob("*"))
    }


def layout(root, linear_relu_program, external_weights_program):
    good = root / "good"
    good.mkdir(parents=True)
    shutil.copy(linear_relu_program.pte, good / "model.pte")
    (good / "config.json").write_text(json.dumps({"instance_group": [{"count": 1}]}))
    (good / "README.txt").write_text("not part of the model")
    weights = root / "weights"
    weights.mkdir()
    shutil.copy(external_weights_program.pte, weights / "model.pte")
    for ptd in external_weights_program.ptds:
        shutil.copy(ptd, weights / ptd.name)
    missing = root / "missing-data"  # the program without its .ptd: refused by ingest
    missing.mkdir()
    shutil.copy(external_weights_program.pte, missing / "model.pte")
    (root / "not-a-model").mkdir()  # no .pte: not an entry
    (root / "not-a-model" / "notes.txt").write_text("x")
    for path in root.rglob("*"):
        path.chmod(0o555 if path.is_dir() else 0o444)
    return root
