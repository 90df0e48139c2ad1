"""A directory laid out and updated like a mounted Kubernetes Secret volume: each file
``NAME`` is a symlink to ``..data/NAME``, ``..data`` a symlink to a timestamped directory,
and an update writes a new directory and swaps ``..data`` with one rename (what the
kubelet's atomic writer does), so readers see the old set or the new, never half."""

from __future__ import annotations

import os
import uuid
from pathlib import Path


class SecretVolume:
    """A Secret-like volume at ``root`` (created)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True)

    def publish(self, files: dict[str, bytes]) -> None:
        """Make ``files`` the volume's content (names not given dangle, as after the
        kubelet removes a key from the Secret)."""
        version = self.root / f"..{uuid.uuid4().hex}"
        version.mkdir()
        for name, data in files.items():
            (version / name).write_bytes(data)
        tmp = self.root / "..data_tmp"
        tmp.symlink_to(version.name)
        os.replace(tmp, self.root / "..data")  # the atomic swap
        for name in files:
            link = self.root / name
            if not link.is_symlink():
                link.symlink_to(Path("..data") / name)

    def path(self, name: str) -> Path:
        """Where file ``name`` is read (through the symlinks)."""
        return self.root / name
