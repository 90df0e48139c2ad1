"""Landlock (Linux >= 5.13) through its three system calls, via ctypes.

A process restricts itself: after :func:`restrict`, it and every process it starts can
only open files beneath the directories given, with the rights given. Rules are tied to
inodes, so symlinks and ``..`` cannot step out of them, and a sandboxed process cannot
ptrace (nor read ``/proc/<pid>/root``, ``environ``, ``ns/``) a process outside its domain.
"""

from __future__ import annotations

import ctypes
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass

_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1

EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5

NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1  # ABI 4

SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6

# Rights that make sense on a regular file or device (the kernel refuses others there).
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
READ_RIGHTS = EXECUTE | READ_FILE | READ_DIR

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # the kernel struct is __attribute__((packed))
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def warm_up() -> None:
    """Build (without using) the ctypes objects of a restriction, so they are cached."""
    _RulesetAttr(0, 0, 0)
    _PathBeneathAttr(0, -1)
    ctypes.sizeof(_RulesetAttr)


def abi_version() -> int:
    """The Landlock ABI this kernel offers (0 when Landlock is absent or disabled)."""
    res = _libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    return int(res) if res > 0 else 0


def fs_rights(abi: int) -> int:
    """Every filesystem right the given ABI knows (rights it does not know are not handled)."""
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


@dataclass(frozen=True)
class PathRule:
    """Rights granted beneath one path."""

    path: str
    """A directory (rights apply beneath it) or a single file."""
    rights: int
    """Bitmask of the constants above; trimmed to what the ABI and the file type allow."""


def _syscall(number: int, *args: object) -> int:
    res = int(_libc.syscall(number, *args))
    if res < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"landlock syscall {number}: {os.strerror(err)}")
    return res


class Ruleset:
    """A Landlock ruleset being built; :meth:`restrict_self` applies it to this process.

    Built in two steps so the fixed part (system directories) can be prepared before a
    request arrives, and only the roots of the call are added on the critical path.
    """

    def __init__(self, *, abi: int, deny_tcp: bool, scope: bool = True) -> None:
        """``deny_tcp`` handles TCP bind/connect with no port allowed (ABI >= 4), a second
        wall behind the network namespace; ``scope`` (ABI >= 6) stops signals to, and
        abstract unix sockets of, processes outside the sandbox. Raises ``OSError`` when
        Landlock is unavailable."""
        self.handled_fs = fs_rights(abi)
        attr = _RulesetAttr(self.handled_fs, 0, 0)
        size = ctypes.sizeof(ctypes.c_uint64)
        if abi >= 4:
            size = 2 * ctypes.sizeof(ctypes.c_uint64)
            if deny_tcp:
                attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP
        if abi >= 6:
            size = ctypes.sizeof(_RulesetAttr)
            if scope:
                attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        self.fd = _syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
        self.skipped: list[str] = []

    def add(self, rule: PathRule) -> bool:
        """Grant ``rule``; False (and remembered in ``skipped``) if the path is missing."""
        try:
            fd = os.open(rule.path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            self.skipped.append(rule.path)
            return False
        try:
            rights = rule.rights & self.handled_fs
            if not stat.S_ISDIR(os.fstat(fd).st_mode):
                rights &= FILE_RIGHTS
            if rights:
                beneath = _PathBeneathAttr(rights, fd)
                _syscall(_SYS_ADD_RULE, self.fd, _RULE_PATH_BENEATH, ctypes.byref(beneath), 0)
        finally:
            os.close(fd)
        return True

    def restrict_self(self) -> None:
        """Enforce the ruleset on this process and its future children (for good).

        The caller must have set no_new_privs (or hold CAP_SYS_ADMIN).
        """
        try:
            _syscall(_SYS_RESTRICT_SELF, self.fd, 0)
        finally:
            self.close()

    def close(self) -> None:
        """Release the ruleset fd."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def restrict(
    rules: Iterable[PathRule], *, abi: int, deny_tcp: bool, scope: bool = True
) -> tuple[str, ...]:
    """Restrict the calling process (and its future children) to ``rules`` in one go.

    Paths that do not exist are skipped; the skipped ones are returned.
    """
    ruleset = Ruleset(abi=abi, deny_tcp=deny_tcp, scope=scope)
    try:
        for rule in rules:
            ruleset.add(rule)
    except BaseException:
        ruleset.close()
        raise
    skipped = tuple(ruleset.skipped)
    ruleset.restrict_self()
    return skipped
