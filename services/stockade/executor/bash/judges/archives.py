"""Archives and compressors: tar, zip/unzip, gzip and friends (what they read, where they
unpack or write)."""

from __future__ import annotations

from stockade.executor.bash.findings import Judge
from stockade.executor.bash.options import (
    literal,
    option_value,
)
from stockade.executor.bash.parser import Word

ARCHIVERS = frozenset({"tar", "gzip", "gunzip", "bzip2", "xz", "zip", "unzip"})
"""The write commands this module judges."""


def judge(
    j: Judge, name: str, args: list[Word], flags: set[str], operands: list[Word]
) -> list[Word] | None:
    """Judge an archiver or compressor; None when it is judged in full, else the operands
    for the generic write judgement (``zip ARCHIVE FILES``, ``gzip FILE``: the files are
    written in place)."""
    if name == "tar":
        tar(j, args, flags, operands)
        return None
    if name in ("gzip", "gunzip", "bzip2", "xz") and flags & {
        "-c",
        "--stdout",
        "-l",
        "--list",
        "-t",
        "--test",
    }:
        for word in operands:
            j.path(word, write=False)
        return None
    if name == "unzip":
        directory = next((args[k + 1] for k in range(len(args) - 1) if args[k].value == "-d"), None)
        listing = flags & {"-l", "-v", "-t", "-p", "-Z"}
        for word in operands[:1]:
            j.path(word, write=False)
        if not listing:
            j.path(directory or literal("."), write=True, what="unpacks into")
            j.effect("unzip unpacks files")
        return None
    return operands


def remote_archive(name: str) -> bool:
    """Whether tar (and cpio, through the same rmt library) takes ``name`` as a file on
    another machine: a ``:`` after the first character with no ``/`` before it
    (``host:file``, ``user@host:/dev/st0``; GNU tar's ``_remdev``)."""
    colon = name.find(":")
    return colon > 0 and "/" not in name[:colon]


def tar(j: Judge, args: list[Word], flags: set[str], operands: list[Word]) -> None:
    """tar: listing (-t) reads the archive, extracting (-x) writes where it unpacks,
    creating or appending writes the archive."""
    mode = ""
    first = args[0].value if args else None
    bundle = first if first and not first.startswith("-") else ""
    letters = bundle + "".join(f[1:] for f in flags if not f.startswith("--"))
    for letter in "tcxru":
        if letter in letters:
            mode = letter
            break
    if "--list" in flags:
        mode = "t"
    elif "--extract" in flags or "--get" in flags:
        mode = "x"
    elif "--create" in flags:
        mode = "c"
    archive = option_value(args, ("-f", "--file"))
    if archive is None and "f" in bundle and len(operands) > 1:
        archive = operands[1]
    if archive is None:
        # `tar -czf FILE`: f in a bundle of short options takes the rest or the next word.
        for k, word in enumerate(args):
            text = word.value or ""
            if text.startswith("-") and not text.startswith("--") and "f" in text[1:]:
                rest = text[text.index("f", 1) + 1 :]
                archive = literal(rest) if rest else (args[k + 1] if k + 1 < len(args) else None)
                break
    if (
        archive is not None
        and archive.value is not None
        and "--force-local" not in flags
        and remote_archive(archive.value)
    ):
        j.network(f"tar opens the remote archive {archive.value} through a remote shell")
        return
    directory = option_value(args, ("-C", "--directory"))
    if mode == "t":
        if archive is not None:
            j.path(archive, write=False)
        return
    if mode == "x":
        if archive is not None:
            j.path(archive, write=False)
        j.path(directory or literal("."), write=True, what="unpacks into")
        j.effect("tar unpacks files")
        return
    if archive is not None:
        j.path(archive, write=True, what="tar writes")
    j.effect("tar writes an archive")
