"""Archives and compressors: tar, zip/unzip, gzip and friends (what they read, where they
unpack or write)."""

from __future__ import annotations

from typing import Final

from stockade.executor.bash.findings import Judge
from stockade.executor.bash.options import (
    literal,
    option_value,
)
from stockade.executor.bash.parser import Word

ARCHIVERS: Final = frozenset({"tar", "gzip", "gunzip", "bzip2", "xz", "zip", "unzip"})
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


# GNU tar's options whose value is a file it reads (names or patterns, one a line: a
# line that is no member is printed back, `tar -tf x -T .env` showed the secret) or
# writes (`tar -tvf x --index-file=.bashrc` writes the listing there, in any mode).
_TAR_READS: Final = ("--files-from", "--exclude-from", "--add-file")
_TAR_WRITES: Final = ("--index-file", "--volno-file", "--listed-incremental")
_TAR_SHORT_READS: Final = frozenset("TX")
_TAR_SHORT_WRITES: Final = frozenset("g")
# Short options that take a value (the rest of the argument or the next word).
_TAR_SHORT_VALUED: Final = frozenset("bCfFgHIKLNTVX")
# Long options that are exact names of their own though a prefix of one above.
_TAR_EXACT: Final = frozenset({"--file", "--exclude", "--list"})


def _tar_files(j: Judge, args: list[Word], bundle: str) -> bool:
    """Judge the files tar's options name (``-T``/``--files-from``, ``-X``, ``--add-file``
    read; ``--index-file``, ``--volno-file``, ``-g`` write), in every mode; False after a
    refusal. Old-style letters (``tar tvTf LIST X``) take their files in order: asked."""
    if set(bundle) & (_TAR_SHORT_READS | _TAR_SHORT_WRITES):
        j.ask("tar's old-style option letters name files in an order not checked", immune=True)
        return False
    for k, word in enumerate(args):
        text = word.value
        nxt = args[k + 1] if k + 1 < len(args) else None
        if text is None:
            continue
        if text == "--":
            break
        if text.startswith("--") and len(text) > 2:
            written, eq, attached = text.partition("=")
            if written in _TAR_EXACT:
                continue
            value = literal(attached) if eq else nxt
            for name in (*_TAR_READS, *_TAR_WRITES):
                if name.startswith(written):
                    _tar_file(j, name, value, write=name in _TAR_WRITES)
                    break
            continue
        if not text.startswith("-") or k == 0 and bundle:
            continue
        for position in range(1, len(text)):
            letter = text[position]
            if letter not in _TAR_SHORT_VALUED:
                continue
            rest = text[position + 1 :]
            value = literal(rest) if rest else nxt
            if letter in _TAR_SHORT_READS or letter in _TAR_SHORT_WRITES:
                _tar_file(j, "-" + letter, value, write=letter in _TAR_SHORT_WRITES)
            break
    return True


def _tar_file(j: Judge, option: str, value: Word | None, *, write: bool) -> None:
    if value is None:
        return
    if write:
        if j.path(value, write=True, what=f"tar {option} writes") is not None:
            j.effect(f"tar {option} writes {value.text}", "low")
    else:
        j.path(value, write=False)


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
    if not _tar_files(j, args, bundle):
        return
    if mode in "cru" and mode:
        # The files archived are read (`tar -cf - .env | cat` prints the secret), from the
        # -C directory when one is given.
        base = directory.value if directory is not None else None
        skip = 1 if archive is not None and "f" in bundle and len(operands) > 1 else 0
        for word in operands[1 + skip :] if bundle else operands:
            if directory is not None and base is None:
                j.ask("tar -C names a directory only known at run time", immune=True)
                break
            if base is not None and word.value is not None and not word.value.startswith("/"):
                j.path(literal(base.rstrip("/") + "/" + word.value), write=False)
            else:
                j.path(word, write=False)
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
