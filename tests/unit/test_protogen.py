"""The committed generated code matches what `make proto` would write."""

from __future__ import annotations

import shutil
from pathlib import Path

from stockade import protogen


def test_generated_code_is_up_to_date() -> None:
    assert protogen.check() == []


def test_check_notices_a_stale_file(tmp_path: Path) -> None:
    shutil.copytree(protogen.ROOT / "clients" / "stockade" / "v1", tmp_path / "stockade" / "v1")
    stale = tmp_path / "stockade" / "v1" / "common_pb2.pyi"
    stale.write_text(stale.read_text() + "\n# edited by hand\n")
    (tmp_path / "stockade" / "v1" / "errors_pb2.py").unlink()
    problems = protogen.check(tmp_path)
    assert "differs: common_pb2.pyi" in problems
    assert "missing: errors_pb2.py" in problems
