"""Skills for the ``load_skill`` built-in: Markdown files in an operator's folder.

A skill named ``x`` is ``x.md`` or ``x/SKILL.md`` in the skills folder (``x.md`` wins when
both exist). Names are checked against a strict pattern; a path that resolves outside the
folder (a symbolic link to ``/etc`` ...) is refused, and so is anything that is not a
regular file (a FIFO is opened non-blocking, so it is refused at once instead of hanging
the call). Symbolic links that stay inside the folder are followed: a Kubernetes
ConfigMap mounts every file as a link into a hidden ``..data`` folder beside it.

Every refusal is a ``SkillError`` whose message the model sees as the tool's result.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

MAX_SKILL_BYTES = 64 * 1024
"""Largest skill file accepted."""
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
"""What a skill name may look like (no separators, no leading dot)."""
SKILL_FILE = "SKILL.md"
"""The file of a skill kept in its own folder."""
MAX_LISTED = 50
"""Skill names named in the tool description at most."""


class SkillError(Exception):
    """A skill could not be loaded; ``message`` is the tool result the model sees."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def valid_name(name: str) -> bool:
    """Whether ``name`` may name a skill."""
    return bool(NAME_PATTERN.fullmatch(name)) and ".." not in name


class SkillLibrary:
    """The skills in one folder."""

    def __init__(self, root: Path) -> None:
        if not root.is_dir():
            raise ValueError(f"skills folder {str(root)!r} is not a directory")
        self.root = root.resolve(strict=True)
        self.startup_names = self.names()
        """The skills found at startup (named in the tool description)."""

    def names(self) -> list[str]:
        """The loadable skill names, sorted (hidden and invalid names are skipped)."""
        found: set[str] = set()
        try:
            with os.scandir(self.root) as scan:
                entries = list(scan)
        except OSError:
            return []
        for entry in entries:
            name = entry.name.removesuffix(".md") if entry.name.endswith(".md") else entry.name
            if not valid_name(name):
                continue
            try:
                if self._locate(name) is not None:
                    found.add(name)
            except SkillError:
                continue
        return sorted(found)

    def description(self) -> str:
        """The ``load_skill`` tool description, naming the skills found at startup."""
        text = "Load a skill's instructions (Markdown) by name."
        names = self.startup_names
        if not names:
            return text + " No skills were found at startup."
        listed = ", ".join(names[:MAX_LISTED])
        more = f" and {len(names) - MAX_LISTED} more" if len(names) > MAX_LISTED else ""
        return f"{text} Available skills: {listed}{more}."

    def _inside(self, path: Path) -> Path | None:
        """``path`` fully resolved when it stays inside the folder, else None."""
        try:
            resolved = path.resolve(strict=True)
        except (OSError, RuntimeError):  # missing, or a symlink loop
            return None
        return resolved if resolved.is_relative_to(self.root) else None

    def _locate(self, name: str) -> Path | None:
        """The resolved file of skill ``name`` (None when there is none); ``SkillError``
        when it is not acceptable. Never opens the file."""
        for candidate in (self.root / f"{name}.md", self.root / name / SKILL_FILE):
            try:
                os.lstat(candidate)
            except OSError:
                continue
            resolved = self._inside(candidate)
            if resolved is None:
                raise SkillError(f"Error: skill {name!r} points outside the skills folder")
            try:
                regular = stat.S_ISREG(os.stat(resolved).st_mode)
            except OSError:  # removed meanwhile
                return None
            if not regular:
                raise SkillError(f"Error: skill {name!r} is not a regular file")
            return resolved
        return None

    def _available(self) -> str:
        names = self.names()
        return f"Available skills: {', '.join(names)}." if names else "No skills exist."

    def load(self, name: str) -> str:
        """The text of skill ``name``; raises ``SkillError`` with a message for the model."""
        if not valid_name(name):
            raise SkillError(
                f"Error: invalid skill name {name[:80]!r} (letters, digits, '_', '-' and '.', "
                f"starting with a letter or digit, at most 64 characters, no '..'). "
                + self._available()
            )
        path = self._locate(name)
        if path is None:
            raise SkillError(f"Error: unknown skill {name!r}. {self._available()}")
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
        try:
            fd = os.open(path, flags)
        except OSError as exc:
            raise SkillError(
                f"Error: skill {name!r} could not be opened ({exc.strerror or 'error'})"
            ) from None
        try:
            info = os.fstat(fd)
            # Checked again on the open file: the path may have changed since _locate.
            if not stat.S_ISREG(info.st_mode):
                raise SkillError(f"Error: skill {name!r} is not a regular file")
            if info.st_size > MAX_SKILL_BYTES:
                raise SkillError(self._too_big(name, info.st_size))
            data = b""
            while len(data) <= MAX_SKILL_BYTES:
                chunk = os.read(fd, MAX_SKILL_BYTES + 1 - len(data))
                if not chunk:
                    break
                data += chunk
        finally:
            os.close(fd)
        if len(data) > MAX_SKILL_BYTES:  # it grew after fstat
            raise SkillError(self._too_big(name, len(data)))
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise SkillError(f"Error: skill {name!r} is not UTF-8 text") from None

    @staticmethod
    def _too_big(name: str, size: int) -> str:
        return (
            f"Error: skill {name!r} is too large ({size} bytes; at most "
            f"{MAX_SKILL_BYTES // 1024} KiB)"
        )
