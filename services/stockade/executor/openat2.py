"""openat2(2) through ctypes, for the path sandbox (SPEC EXE-4).

Kept apart from :mod:`stockade.executor.paths` so that module can be compiled to C with
mypyc (``make native``): ctypes structures are Python classes mypyc does not compile.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import sys
from collections.abc import Callable

__all__ = [
    "NATIVE",
    "RESOLVE_BENEATH",
    "entry_exists",
    "openat2",
    "probe",
    "symlink_free_errno",
    "symlink_free_links",
]

_SYS_OPENAT2 = 437  # same number on x86_64 and aarch64 (unified syscall table)
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08


class _OpenHow(ctypes.Structure):
    _fields_ = (
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    )


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long


_O_TMPFILE: int = getattr(os, "O_TMPFILE", 0)


def openat2(dir_fd: int, path: str, flags: int, mode: int) -> int:
    """``openat2`` confined beneath ``dir_fd`` with no symlinks at all; raises OSError."""
    how = _OpenHow(
        flags=flags,
        # openat2 rejects a mode unless it creates; O_TMPFILE includes the O_DIRECTORY bit,
        # so test for all of its bits.
        mode=mode if flags & os.O_CREAT or (_O_TMPFILE and flags & _O_TMPFILE == _O_TMPFILE) else 0,
        resolve=RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS,
    )
    fd = _syscall(
        ctypes.c_long(_SYS_OPENAT2),
        ctypes.c_int(dir_fd),
        ctypes.c_char_p(os.fsencode(path)),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return int(fd)


def probe() -> bool:
    """Whether this kernel (and its seccomp filter) lets us call openat2."""
    root = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = openat2(root, ".", 0, 0)
    except OSError:
        # ENOSYS (old kernel) or EPERM (seccomp filter): use the O_NOFOLLOW walk instead.
        return False
    finally:
        os.close(root)
    os.close(fd)
    return True


# The symlink-free check of _resolve's fast path: one openat2 from the process's view of
# the file system (AT_FDCWD with an absolute path) that fails with ELOOP at the first
# symlink anywhere in the path (trailing one included: no O_NOFOLLOW) and never follows a
# magic link. The arguments are built once: this runs for every path a command names.
_AT_FDCWD = ctypes.c_int(-100)
_SYS_OPENAT2_NR = ctypes.c_long(_SYS_OPENAT2)
_NO_SYMLINKS_HOW = _OpenHow(
    flags=os.O_PATH | os.O_CLOEXEC,
    mode=0,
    resolve=_RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS,
)
_NO_SYMLINKS_REF = ctypes.byref(_NO_SYMLINKS_HOW)
_HOW_SIZE = ctypes.c_size_t(ctypes.sizeof(_OpenHow))
_FS_ENCODING = sys.getfilesystemencoding()
_FS_ERRORS = sys.getfilesystemencodeerrors()


def ctypes_symlink_free_errno(path: str) -> int:
    """0 when the absolute ``path`` exists with no symlink in any component (then it is
    its own canonical form); otherwise the errno of the check (ELOOP at a symlink, ENOENT
    when missing, EACCES, ENOTDIR …): the caller then settles it another way.
    """
    name = path.encode(_FS_ENCODING, _FS_ERRORS)  # os.fsencode, without its call layers
    fd = _syscall(_SYS_OPENAT2_NR, _AT_FDCWD, name, _NO_SYMLINKS_REF, _HOW_SIZE)
    if fd < 0:
        return ctypes.get_errno() or -1
    os.close(fd)
    return 0


def ctypes_symlink_free_links(path: str) -> int:
    """:func:`ctypes_symlink_free_errno`, and EMLINK when the path exists with no symlink
    but is a regular file with more than one link (another of its names may be a file the
    sandbox refuses to read): for reads."""
    name = path.encode(_FS_ENCODING, _FS_ERRORS)
    fd = _syscall(_SYS_OPENAT2_NR, _AT_FDCWD, name, _NO_SYMLINKS_REF, _HOW_SIZE)
    if fd < 0:
        return ctypes.get_errno() or -1
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    return errno.EMLINK if stat.S_ISREG(st.st_mode) and st.st_nlink > 1 else 0


def os_entry_exists(path: str) -> bool:
    """Whether an entry named ``path`` exists, a final symlink not followed (see
    :func:`stockade.executor.paths.lexists`)."""
    try:
        return os.access(path, os.F_OK, effective_ids=True, follow_symlinks=False)
    except ValueError:  # an embedded NUL: no such file, as os.path.lexists answers
        return False


# `make native` also builds _openat2.c: the same calls without ctypes' or the os module's
# layers (about 1 µs of the 2.3 µs a check costs through ctypes; it runs for every path a
# command names). tests/unit/executor/test_openat2.py holds the two to the same answers.
symlink_free_errno: Callable[[str], int]
symlink_free_links: Callable[[str], int]
entry_exists: Callable[[str], bool]
try:
    from stockade.executor._openat2 import entry_exists, symlink_free_errno, symlink_free_links
except ImportError:
    NATIVE = False
    symlink_free_errno = ctypes_symlink_free_errno
    symlink_free_links = ctypes_symlink_free_links
    entry_exists = os_entry_exists
else:
    NATIVE = True
