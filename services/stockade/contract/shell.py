"""The shell wrapper table shared by the decision rules and the executor's bash analysis.

One table, so the two sides of the trust boundary cannot disagree about which words run
another command and how their options read (DEC-1 rev 2: they once did, and
``time -f %e rm x`` became ``%e rm x`` on one side only). No gRPC, no service imports.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "MAX_COMMAND_CHARS",
    "PRIVILEGE_WRAPPERS",
    "SYSTEM_BIN_DIRS",
    "WRAPPERS",
    "WrapperSpec",
    "canonical_option",
    "split_option",
]


def _f(*options: str) -> frozenset[str]:
    return frozenset(options)


@dataclass(frozen=True)
class WrapperSpec:
    """A command that runs another command given in its arguments."""

    value_options: frozenset[str] = frozenset()
    """Options whose value is the next argument."""
    positionals: int = 0
    """Arguments to skip before the wrapped command (``timeout 5 CMD``)."""
    assignments: bool = False
    """``NAME=value`` arguments set the environment (env)."""
    deny_options: frozenset[str] = frozenset()
    """Options that run a string through a shell or parser (``env -S``)."""
    chdir_options: frozenset[str] = frozenset()
    """Options that change directory before running (``env -C DIR``)."""
    read_options: frozenset[str] = frozenset()
    """Options whose value is a file read (``xargs -a FILE``)."""
    write_options: frozenset[str] = frozenset()
    """Options (also in ``value_options``) whose value is a file the wrapper writes
    (``time -o FILE``, ``valgrind --log-file=FILE``): judged as writes (EXE-8e)."""
    write_positionals: int = 0
    """How many of the leading ``positionals`` name a file the wrapper creates or opens
    for writing (``flock FILE CMD``; a number there is a file descriptor)."""
    stdin_args: bool = False
    """The wrapped command gets more arguments from stdin (xargs)."""
    env_options: frozenset[str] = frozenset()
    """Options (also in ``value_options``) whose value names a variable the wrapper sets
    in the wrapped command's environment (``xargs --process-slot-var=PATH echo`` runs
    ./0/echo): judged as that assignment."""
    no_command_options: frozenset[str] = frozenset()
    """Options after which the words are not a command to run (``command -v ls``)."""
    transparent: bool = False
    """The wrapped command receives its arguments unchanged (``time``, ``nice``, ``timeout``):
    an ALLOW rule may look through it (DEC-1 rev 2). Never ``xargs`` or ``find -exec``, which
    add arguments the rule did not name."""


WRAPPERS: dict[str, WrapperSpec] = {
    # env [-i] [-u NAME] [-C DIR] [NAME=VALUE]... CMD; -S splits a string into a command.
    "env": WrapperSpec(
        value_options=_f("-u", "--unset", "-C", "--chdir"),
        assignments=True,
        deny_options=_f("-S", "--split-string"),
        chdir_options=_f("-C", "--chdir"),
    ),
    # command [-p] CMD runs CMD bypassing functions; -v/-V only describe it.
    "command": WrapperSpec(no_command_options=_f("-v", "-V"), transparent=True),
    "builtin": WrapperSpec(transparent=True),  # runs a shell builtin by name
    # exec [-cl] [-a NAME] CMD replaces the shell with CMD.
    "exec": WrapperSpec(value_options=_f("-a"), transparent=True),
    "nice": WrapperSpec(value_options=_f("-n", "--adjustment"), transparent=True),  # lower priority
    "nohup": WrapperSpec(transparent=True),  # ignore hangups
    "time": WrapperSpec(
        value_options=_f("-f", "--format", "-o", "--output"),
        write_options=_f("-o", "--output"),
        transparent=True,
    ),  # measure
    # timeout [-s SIG] [-k DUR] DURATION CMD: limits how long CMD runs.
    "timeout": WrapperSpec(
        value_options=_f("-s", "--signal", "-k", "--kill-after"), positionals=1, transparent=True
    ),
    # stdbuf -oL CMD: changes CMD's buffering.
    "stdbuf": WrapperSpec(
        value_options=_f("-i", "-o", "-e", "--input", "--output", "--error"), transparent=True
    ),
    # xargs runs CMD with arguments read from stdin (unknown when judging).
    # -i[R], -e[EOF], -l[N] and --replace[=R], --eof[=EOF], --max-lines[=N] take their
    # value only attached: `xargs -i sh -c id` runs sh (they are flags here, not options
    # that swallow the next word).
    "xargs": WrapperSpec(
        value_options=_f(
            "-I",
            "-n",
            "-P",
            "-L",
            "-d",
            "-E",
            "-s",
            "--max-args",
            "--max-procs",
            "--delimiter",
            "--max-chars",
            "--process-slot-var",
        ),
        read_options=_f("-a", "--arg-file"),
        stdin_args=True,
        env_options=_f("--process-slot-var"),
    ),
    # ionice -c3 CMD: I/O priority; -p PID only changes another process.
    "ionice": WrapperSpec(
        value_options=_f("-c", "-n", "--class", "--classdata"),
        no_command_options=_f("-p", "--pid", "-P", "--pgid", "-u", "--uid"),
    ),
    "setsid": WrapperSpec(),  # new session
    # chrt PRIO CMD: scheduling policy.
    "chrt": WrapperSpec(positionals=1, no_command_options=_f("-p", "--pid")),
    # taskset MASK CMD: CPU affinity.
    "taskset": WrapperSpec(positionals=1, no_command_options=_f("-p", "--pid")),
    # nocache CMD: drops page cache use.
    "nocache": WrapperSpec(transparent=True),
    # unbuffer CMD (expect): runs CMD on a pty.
    "unbuffer": WrapperSpec(),
    "coproc": WrapperSpec(),  # runs CMD as a coprocess
    # flock FILE CMD: runs CMD holding a lock.
    "flock": WrapperSpec(
        value_options=_f("-w", "--timeout", "-E", "--conflict-exit-code"),
        positionals=1,
        write_positionals=1,  # the lock file is created if missing
        # -c runs a string through sh.
        deny_options=_f("-c", "--command"),
    ),
    # prlimit --nofile=N CMD: resource limits; --pid changes another process.
    "prlimit": WrapperSpec(no_command_options=_f("-p", "--pid")),
    "busybox": WrapperSpec(),  # `busybox rm x` runs the rm applet
    "toybox": WrapperSpec(),  # same, toybox applets
    # catchsegv CMD: prints a backtrace on a crash.
    "catchsegv": WrapperSpec(),
    # valgrind CMD: runs CMD under a checker.
    # rlwrap CMD: line editing around CMD.
    # -l logs the session and -H keeps the history in a file; -f reads completions.
    "rlwrap": WrapperSpec(
        value_options=_f("-f", "-H", "-l", "-s", "-S", "-z"), write_options=_f("-l", "-H")
    ),
    # fakeroot CMD: pretends to be root (LD_PRELOAD), CMD still runs as us.
    # -s saves the fake ownership database to a file (-i loads one).
    # fakeroot -l/--lib LIB preloads a library and --faked BIN runs a program as its daemon
    # (`fakeroot --faked ./x true` runs ./x: found by the option-table test).
    "fakeroot": WrapperSpec(
        value_options=_f("-l", "--lib", "--faked", "-s", "-i"),
        deny_options=_f("-l", "--lib", "--faked"),
        read_options=_f("-i"),
        write_options=_f("-s"),
    ),
    # faketime TIME CMD: fakes the clock.
    "faketime": WrapperSpec(positionals=1),
    # chronic CMD (moreutils): hides CMD's output unless it fails.
    "chronic": WrapperSpec(transparent=True),
    # dbus-run-session CMD / xvfb-run CMD: run CMD inside a session or X server.
    "dbus-run-session": WrapperSpec(),
    # -e sends the X server's errors to a file, -f keeps its auth cookie in one.
    "xvfb-run": WrapperSpec(
        value_options=_f("-n", "-s", "-f", "-e", "-p", "--error-file", "--auth-file"),
        write_options=_f("-f", "-e", "--error-file", "--auth-file"),
    ),
    "valgrind": WrapperSpec(
        value_options=_f("--tool", "--log-file", "--xml-file"),
        write_options=_f("--log-file", "--xml-file"),
    ),
}
"""Commands that run the command in their arguments: the analysis judges that command."""


PRIVILEGE_WRAPPERS: dict[str, WrapperSpec] = {
    "sudo": WrapperSpec(value_options=_f("-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U")),
    "doas": WrapperSpec(value_options=_f("-u", "-C")),
    # su -c STRING runs STRING through the target user's shell.
    "su": WrapperSpec(
        value_options=_f("-s", "-g", "-G", "--shell"), deny_options=_f("-c", "--command")
    ),
    "pkexec": WrapperSpec(value_options=_f("--user")),
    "chroot": WrapperSpec(positionals=1, value_options=_f("--userspec", "--groups")),
}
"""Commands that run another command with other rights. The executor's analysis refuses
them outright; the decision rules look through them for DENY and ASK only, so a DENY on
``rm`` also catches ``sudo rm`` while an ALLOW on ``git status`` never allows
``sudo git status``."""


MAX_COMMAND_CHARS = 64 * 1024
"""The longest command (in characters) either side accepts: the executor refuses a longer
one unparsed, and the decision service refuses to decide it (INVALID_ARGUMENT naming the
limit), so no rule set meets an unbounded input."""


SYSTEM_BIN_DIRS = frozenset(
    {"/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin", "/usr/local/sbin"}
)
"""Directories whose programs are the system's: ``/usr/bin/ls`` is ``ls``; ``./ls`` is not."""


def split_option(value: str, takes_value: frozenset[str]) -> tuple[str, str | None]:
    """``--opt=v`` → (``--opt``, ``v``); ``-n5`` → (``-n``, ``5``) when -n takes a value."""
    if value.startswith("--"):
        option, eq, attached = value.partition("=")
        return option, attached if eq else None
    option = value[:2]
    if option in takes_value and len(value) > 2:
        return option, value[2:]
    return option, None


def canonical_option(option: str, known: Sequence[frozenset[str]]) -> str:
    """GNU getopt (and git) accept any unambiguous prefix of a long option: `--compress-prog`
    is `--compress-program`. Map a prefix to the known option it may stand for, trying the
    sets in order (most dangerous first), so an abbreviation cannot dodge a check."""
    if not option.startswith("--") or len(option) < 3:
        return option
    for options in known:
        if option in options:
            return option
    for options in known:
        matches = sorted(o for o in options if o.startswith(option))
        if matches:
            return matches[0]
    return option
