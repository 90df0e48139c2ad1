"""`make test` provides what the stores' TLS tests run (tests/pg_tls.py): Debian's
PostgreSQL server, installed when missing and without a cluster of its own (the tests make
a throwaway one; a package default cluster would be a server nobody asked for on 5432).
Run with a stand-in apt-get, so nothing is installed here."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _make(tmp_path: Path, server_glob: str, apt_exit: int = 0) -> subprocess.CompletedProcess[str]:
    log = tmp_path / "apt.log"
    apt = tmp_path / "apt-get"
    apt.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexit {apt_exit}\n')
    apt.chmod(0o755)
    return subprocess.run(
        [
            "make",
            "-s",
            "-C",
            str(ROOT),
            "postgresql",
            f"PG_SERVER_GLOB={server_glob}",
            f"APT_GET={apt}",
            f"PG_CREATECLUSTER_DIR={tmp_path / 'createcluster.d'}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_missing_server_is_installed_without_a_cluster(tmp_path: Path) -> None:
    done = _make(tmp_path, str(tmp_path / "none" / "*" / "bin" / "postgres"))
    assert done.returncode == 0, done.stderr
    calls = (tmp_path / "apt.log").read_text().splitlines()
    assert calls == ["update -qq", "install -y -qq postgresql"]
    conf = (tmp_path / "createcluster.d" / "stockade-tests.conf").read_text()
    assert conf.strip() == "create_main_cluster = false"


def test_a_present_server_is_left_alone(tmp_path: Path) -> None:
    binary = tmp_path / "pg" / "15" / "bin" / "postgres"
    binary.parent.mkdir(parents=True)
    binary.write_text("")
    done = _make(tmp_path, str(tmp_path / "pg" / "*" / "bin" / "postgres"))
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "apt.log").exists()
    assert not (tmp_path / "createcluster.d").exists()


def test_a_failed_install_stops_make_saying_what_to_do(tmp_path: Path) -> None:
    done = _make(tmp_path, str(tmp_path / "none" / "postgres"), apt_exit=100)
    assert done.returncode != 0
    assert "could not install postgresql: run 'apt-get install -y postgresql'" in done.stderr


def test_make_test_runs_it() -> None:
    makefile = (ROOT / "Makefile").read_text()
    target = re.search(r"^test:([^#\n]*)", makefile, re.M)
    assert target and "postgresql" in target.group(1).split()
