"""Thin ctypes wrappers for the Linux calls the confinement layers need.

Python 3.11 has no ``os.unshare``/``os.setns``/``mount``/``prctl``/``capset``; these
wrappers raise ``OSError`` with the real errno so callers can report precisely why a
layer is unavailable. Only the launcher and its forked workers call them: never the
executor process itself (these calls change the calling process for good).
"""

from __future__ import annotations

import ctypes
import os

_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl.argtypes = [
    ctypes.c_int,
    ctypes.c_ulong,
    ctypes.c_ulong,
    ctypes.c_ulong,
    ctypes.c_ulong,
]
_libc.prctl.restype = ctypes.c_int

CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CLONE_NEWIPC = 0x08000000

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MS_SLAVE = 0x80000

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_SET_NO_NEW_PRIVS = 38
PR_GET_NO_NEW_PRIVS = 39
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4

# SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP(_LOCKED) |
# SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE(_LOCKED): uid 0 gains no
# capabilities at exec and the command cannot undo that.
SECURE_BITS_LOCKDOWN = 0x1 | 0x2 | 0x4 | 0x8 | 0x20 | 0x40 | 0x80

_LINUX_CAPABILITY_VERSION_3 = 0x20080522


def warm_up() -> None:
    """Resolve every C function used here (ctypes caches them on first lookup)."""
    for name in ("unshare", "setns", "mount", "prctl", "capset"):
        getattr(_libc, name)
    _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    (_CapData * 2)()


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def unshare(flags: int) -> None:
    """unshare(2)."""
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def setns(fd: int, nstype: int) -> None:
    """setns(2)."""
    _check(_libc.setns(ctypes.c_int(fd), ctypes.c_int(nstype)), "setns")


def mount(
    source: str | None, target: str, fstype: str | None, flags: int, data: str | None
) -> None:
    """mount(2)."""

    def enc(value: str | None) -> bytes | None:
        return None if value is None else os.fsencode(value)

    _check(
        _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
        f"mount {target}",
    )


def prctl(option: int, arg2: int = 0, arg3: int = 0, arg4: int = 0, arg5: int = 0) -> int:
    """prctl(2) with integer arguments."""
    return _check(_libc.prctl(option, arg2, arg3, arg4, arg5), f"prctl({option})")


def set_no_new_privs() -> None:
    """PR_SET_NO_NEW_PRIVS: exec can never grant privileges (setuid bits, file caps)."""
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def no_new_privs() -> bool:
    """Whether no_new_privs is set for this process."""
    return prctl(PR_GET_NO_NEW_PRIVS) == 1


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _read_last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as fh:
            return int(fh.read())
    except (OSError, ValueError):
        return 63  # unknown: try every bit (EINVAL for the ones that do not exist)


_LAST_CAP = _read_last_cap()


def last_cap() -> int:
    """The highest capability number this kernel knows (read once, at import)."""
    return _LAST_CAP


def drop_bounding_set() -> None:
    """Empty the capability bounding set: no exec can ever grant a capability again.

    Needs CAP_SETPCAP; the effective and permitted sets are untouched, so the caller
    keeps what it needs for the rest of its set-up (done ahead of time, in the worker's
    preparation, to keep ~40 calls off the critical path).
    """
    prctl_fn = _libc.prctl
    for cap in range(last_cap() + 1):
        if prctl_fn(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            if err != 22:  # EINVAL: the capability does not exist here
                raise OSError(err, f"PR_CAPBSET_DROP {cap}: {os.strerror(err)}")


def drop_all_capabilities() -> None:
    """Clear the ambient, inheritable, permitted and effective sets, lock securebits.

    Call :func:`drop_bounding_set` first. Locking the securebits needs CAP_SETPCAP, so
    it comes before capset() empties the effective set.
    """
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    prctl(PR_SET_SECUREBITS, SECURE_BITS_LOCKDOWN)
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")


def has_effective_capability(cap: int) -> bool:
    """Whether this process holds capability ``cap`` in its effective set."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> cap & 1)
    except (OSError, ValueError):
        pass
    return False


CAP_SYS_ADMIN = 21
CAP_SETPCAP = 8


# --- seccomp: the kernel keyrings ------------------------------------------------------
#
# keyctl(2), add_key(2) and request_key(2) reach the keyrings of the command's uid (the
# user keyring `@u` is shared by every process of that uid on the host: Kerberos tickets,
# fscrypt/ecryptfs keys, tokens a service parked there); no path is involved, so neither
# Landlock nor the mount masks govern them. A small classic-BPF seccomp filter refuses
# them (EPERM) and kills any syscall of a foreign ABI (x32, i386), whose numbers differ.

PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
_SECCOMP_RET_KILL_PROCESS = 0x80000000
_SECCOMP_RET_ERRNO = 0x00050000
_SECCOMP_RET_ALLOW = 0x7FFF0000
_X32_SYSCALL_BIT = 0x40000000
_BPF_LD_W_ABS = 0x20
_BPF_JEQ_K = 0x15
_BPF_JGE_K = 0x35
_BPF_RET_K = 0x06

# machine -> (AUDIT_ARCH_*, add_key, request_key, keyctl)
_KEYRING_SYSCALLS: dict[str, tuple[int, int, int, int]] = {
    "x86_64": (0xC000003E, 248, 249, 250),
    "aarch64": (0xC00000B7, 217, 218, 219),
}


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_ushort),
        ("jt", ctypes.c_ubyte),
        ("jf", ctypes.c_ubyte),
        ("k", ctypes.c_uint),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def keyring_filter_supported() -> bool:
    """Whether :func:`deny_keyring_syscalls` knows this machine's syscall numbers."""
    return os.uname().machine in _KEYRING_SYSCALLS


def deny_keyring_syscalls() -> None:
    """Install the seccomp filter (needs no_new_privs; inherited by every child, for
    good). Raises ``OSError`` when the machine is unknown or the kernel refuses."""
    spec = _KEYRING_SYSCALLS.get(os.uname().machine)
    if spec is None:
        raise OSError(0, f"no seccomp filter for {os.uname().machine}")
    arch, add_key, request_key, keyctl = spec
    program = [
        (_BPF_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        (_BPF_JEQ_K, 1, 0, arch),
        (_BPF_RET_K, 0, 0, _SECCOMP_RET_KILL_PROCESS),
        (_BPF_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
        (_BPF_JGE_K, 0, 1, _X32_SYSCALL_BIT),
        (_BPF_RET_K, 0, 0, _SECCOMP_RET_KILL_PROCESS),
        (_BPF_JEQ_K, 3, 0, add_key),
        (_BPF_JEQ_K, 2, 0, request_key),
        (_BPF_JEQ_K, 1, 0, keyctl),
        (_BPF_RET_K, 0, 0, _SECCOMP_RET_ALLOW),
        (_BPF_RET_K, 0, 0, _SECCOMP_RET_ERRNO | 1),  # EPERM
    ]
    filters = (_SockFilter * len(program))(*(_SockFilter(*f) for f in program))
    prog = _SockFprog(len(program), filters)
    _check(
        _libc.prctl(
            ctypes.c_int(PR_SET_SECCOMP),
            ctypes.c_ulong(SECCOMP_MODE_FILTER),
            ctypes.c_ulong(ctypes.addressof(prog)),
            ctypes.c_ulong(0),
            ctypes.c_ulong(0),
        ),
        "prctl(PR_SET_SECCOMP)",
    )
