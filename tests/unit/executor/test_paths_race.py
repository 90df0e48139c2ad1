"""EXE-4: a symlink swapped in after the check cannot redirect the open (real threads)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from stockade.errors import PathRefused
from stockade.executor.paths import PathSandbox, Root

ROUNDS = 3000


def _flipper(ws: Path, outside: Path, name: str, stop: threading.Event) -> None:
    """Keep swapping ws/<name> between a real directory and a symlink to ``outside``."""
    real = ws / name
    parked = ws / f"{name}.parked"
    while not stop.is_set():
        os.rename(real, parked)
        os.symlink(outside, real)
        os.unlink(real)
        os.rename(parked, real)


def _setup(tmp_path: Path) -> tuple[Path, Path, PathSandbox]:
    ws = tmp_path / "ws"
    outside = tmp_path / "outside"
    (ws / "d").mkdir(parents=True)
    outside.mkdir()
    (ws / "d" / "s.txt").write_text("inside")
    (outside / "s.txt").write_text("SECRET")
    return ws, outside, PathSandbox([Root(str(ws), True)], str(ws))


def test_read_race_never_reads_outside(tmp_path: Path) -> None:
    ws, outside, sb = _setup(tmp_path)
    stop = threading.Event()
    flipper = threading.Thread(target=_flipper, args=(ws, outside, "d", stop))
    flipper.start()
    opened = refused = 0
    try:
        for _ in range(ROUNDS):
            try:
                fd = sb.open("d/s.txt", os.O_RDONLY)
            except PathRefused:
                refused += 1
                continue
            try:
                assert os.read(fd, 100) == b"inside"
            finally:
                os.close(fd)
            opened += 1
    finally:
        stop.set()
        flipper.join()
    assert opened + refused == ROUNDS
    assert (outside / "s.txt").read_text() == "SECRET"


def test_write_race_never_writes_outside(tmp_path: Path) -> None:
    ws, outside, sb = _setup(tmp_path)
    stop = threading.Event()
    flipper = threading.Thread(target=_flipper, args=(ws, outside, "d", stop))
    flipper.start()
    try:
        for i in range(ROUNDS):
            try:
                fd = sb.open(f"d/w{i % 7}.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            except PathRefused:
                continue
            os.write(fd, b"written")
            os.close(fd)
    finally:
        stop.set()
        flipper.join()
    assert sorted(p.name for p in outside.iterdir()) == ["s.txt"]
    assert (outside / "s.txt").read_text() == "SECRET"


def test_final_component_race(tmp_path: Path) -> None:
    """The file itself flips between a regular file and a symlink to the secret."""
    ws, outside, sb = _setup(tmp_path)
    target = ws / "f.txt"
    target.write_text("inside")
    stop = threading.Event()

    def flip() -> None:
        link_tmp = ws / "f.link"
        file_tmp = ws / "f.file"
        file_tmp.write_text("inside")
        while not stop.is_set():
            os.symlink(outside / "s.txt", link_tmp)
            os.replace(link_tmp, target)  # now a symlink out
            file_tmp.write_text("inside")
            os.replace(file_tmp, target)  # now a regular file again

    flipper = threading.Thread(target=flip)
    flipper.start()
    seen: set[bytes] = set()
    try:
        for _ in range(ROUNDS):
            try:
                fd = sb.open("f.txt", os.O_RDONLY)
            except PathRefused:
                continue
            try:
                seen.add(os.read(fd, 100))
            finally:
                os.close(fd)
    finally:
        stop.set()
        flipper.join()
    assert b"SECRET" not in seen
