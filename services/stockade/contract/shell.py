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
    flag_options: frozenset[str] = frozenset()
    """Options that take no separate word: flags, and options whose value can only be
    attached (``xargs -i``, ``env --block-signal[=SIG]``). An option in none of the sets
    is unknown (:meth:`knows`): it may take the next word, and then the wrong word would
    be judged as the program run (``env -a NAME CMD``: coreutils 9.5 added ``-a``). The
    analysis asks then (bypass-immune) and the rules' ALLOW form does not look through."""
    numeric_options: bool = False
    """``-NUM`` is an option with no separate value (``nice -5 CMD``)."""

    def knows(self, option: str) -> bool:
        """Whether ``option`` (a short option letter ``-x`` or a whole long option, after
        prefix resolution) is in one of this wrapper's option sets."""
        return (
            option in self.flag_options
            or option in self.value_options
            or option in self.chdir_options
            or option in self.read_options
            or option in self.deny_options
            or option in self.no_command_options
            or option in ("--help", "--version")
            or (self.numeric_options and option[1:].isdigit())
        )


WRAPPERS: dict[str, WrapperSpec] = {
    # Option sets checked against the programs' --help here (coreutils 9.1, util-linux 2.38,
    # findutils 4.9, GNU time 1.9) and test_bash_option_tables.py; options of newer
    # versions are listed too (env -a/--argv0, coreutils 9.5).
    # env [-i] [-u NAME] [-C DIR] [-a ARG0] [NAME=VALUE]... CMD; -S splits a string into a
    # command.
    "env": WrapperSpec(
        value_options=_f("-u", "--unset", "-C", "--chdir", "-a", "--argv0"),
        assignments=True,
        deny_options=_f("-S", "--split-string"),
        chdir_options=_f("-C", "--chdir"),
        flag_options=_f(
            "-i",
            "--ignore-environment",
            "-0",
            "--null",
            "-v",
            "--debug",
            "--block-signal",
            "--default-signal",
            "--ignore-signal",
            "--list-signal-handling",
        ),  # fmt: skip
    ),
    # command [-p] CMD runs CMD bypassing functions; -v/-V only describe it.
    "command": WrapperSpec(
        no_command_options=_f("-v", "-V"), flag_options=_f("-p"), transparent=True
    ),
    "builtin": WrapperSpec(transparent=True),  # runs a shell builtin by name; no options
    # exec [-cl] [-a NAME] CMD replaces the shell with CMD.
    "exec": WrapperSpec(value_options=_f("-a"), flag_options=_f("-c", "-l"), transparent=True),
    # nice [-n N | -N] CMD: lower priority.
    "nice": WrapperSpec(
        value_options=_f("-n", "--adjustment"), numeric_options=True, transparent=True
    ),
    "nohup": WrapperSpec(transparent=True),  # ignore hangups
    "time": WrapperSpec(
        value_options=_f("-f", "--format", "-o", "--output"),
        write_options=_f("-o", "--output"),
        flag_options=_f(
            "-a", "--append", "-p", "--portability", "-q", "--quiet", "-v", "--verbose"
        ),
        transparent=True,
    ),  # measure
    # timeout [-s SIG] [-k DUR] DURATION CMD: limits how long CMD runs.
    "timeout": WrapperSpec(
        value_options=_f("-s", "--signal", "-k", "--kill-after"),
        positionals=1,
        flag_options=_f("--preserve-status", "--foreground", "-v", "--verbose"),
        transparent=True,
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
        flag_options=_f(
            "-0",
            "--null",
            "-i",
            "--replace",
            "-e",
            "--eof",
            "-l",
            "--max-lines",
            "-o",
            "--open-tty",
            "-p",
            "--interactive",
            "-r",
            "--no-run-if-empty",
            "-t",
            "--verbose",
            "-x",
            "--exit",
            "--show-limits",
        ),  # fmt: skip
    ),
    # ionice -c3 CMD: I/O priority; -p PID only changes another process.
    "ionice": WrapperSpec(
        value_options=_f("-c", "-n", "--class", "--classdata"),
        no_command_options=_f("-p", "--pid", "-P", "--pgid", "-u", "--uid"),
        flag_options=_f("-t", "--ignore"),
    ),
    # setsid [-cfw] CMD: new session.
    "setsid": WrapperSpec(flag_options=_f("-c", "--ctty", "-f", "--fork", "-w", "--wait")),
    # chrt [policy] PRIO CMD: scheduling policy; -T/-P/-D take nanoseconds.
    "chrt": WrapperSpec(
        positionals=1,
        value_options=_f("-T", "--sched-runtime", "-P", "--sched-period", "-D", "--sched-deadline"),
        no_command_options=_f("-p", "--pid", "-m", "--max"),
        flag_options=_f(
            "-b",
            "--batch",
            "-d",
            "--deadline",
            "-f",
            "--fifo",
            "-i",
            "--idle",
            "-o",
            "--other",
            "-r",
            "--rr",
            "-R",
            "--reset-on-fork",
            "-a",
            "--all-tasks",
            "-v",
            "--verbose",
        ),  # fmt: skip
    ),
    # taskset MASK CMD: CPU affinity.
    "taskset": WrapperSpec(
        positionals=1,
        no_command_options=_f("-p", "--pid"),
        flag_options=_f("-a", "--all-tasks", "-c", "--cpu-list"),
    ),
    # nocache [-n N] CMD: drops page cache use.
    "nocache": WrapperSpec(value_options=_f("-n"), transparent=True),
    # unbuffer [-p] CMD (expect): runs CMD on a pty.
    "unbuffer": WrapperSpec(flag_options=_f("-p")),
    "coproc": WrapperSpec(),  # runs CMD as a coprocess
    # flock FILE CMD: runs CMD holding a lock.
    "flock": WrapperSpec(
        value_options=_f("-w", "--timeout", "--wait", "-E", "--conflict-exit-code"),
        positionals=1,
        write_positionals=1,  # the lock file is created if missing
        # -c runs a string through sh.
        deny_options=_f("-c", "--command"),
        flag_options=_f(
            "-s",
            "--shared",
            "-x",
            "-e",
            "--exclusive",
            "-u",
            "--unlock",
            "-n",
            "--nb",
            "--nonblock",
            "-o",
            "--close",
            "-F",
            "--no-fork",
            "--verbose",
        ),  # fmt: skip
    ),
    # prlimit --nofile=N CMD: resource limits (a limit's value only attached); --pid changes
    # another process; -o takes the output columns.
    "prlimit": WrapperSpec(
        value_options=_f("-o", "--output"),
        no_command_options=_f("-p", "--pid"),
        flag_options=_f(
            "--noheadings",
            "--raw",
            "--verbose",
            "-c",
            "--core",
            "-d",
            "--data",
            "-e",
            "--nice",
            "-f",
            "--fsize",
            "-i",
            "--sigpending",
            "-l",
            "--memlock",
            "-m",
            "--rss",
            "-n",
            "--nofile",
            "-q",
            "--msgqueue",
            "-r",
            "--rtprio",
            "-s",
            "--stack",
            "-t",
            "--cpu",
            "-u",
            "--nproc",
            "-v",
            "--as",
            "-x",
            "--locks",
            "-y",
            "--rttime",
        ),  # fmt: skip
    ),
    "busybox": WrapperSpec(),  # `busybox rm x` runs the rm applet
    "toybox": WrapperSpec(),  # same, toybox applets
    # catchsegv CMD: prints a backtrace on a crash.
    "catchsegv": WrapperSpec(),
    # rlwrap CMD: line editing around CMD.
    # -l logs the session and -H keeps the history in a file; -f reads completions; -z
    # runs a filter program.
    "rlwrap": WrapperSpec(
        value_options=_f("-f", "-H", "-l", "-s", "-S", "-z"),
        write_options=_f("-l", "-H"),
        read_options=_f("-f"),
        deny_options=_f("-z", "--filter"),
    ),
    # fakeroot CMD: pretends to be root (LD_PRELOAD), CMD still runs as us.
    # -s saves the fake ownership database to a file (-i loads one).
    # fakeroot -l/--lib LIB preloads a library and --faked BIN runs a program as its daemon
    # (`fakeroot --faked ./x true` runs ./x: found by the option-table test).
    "fakeroot": WrapperSpec(
        value_options=_f("-l", "--lib", "--faked", "-f", "-s", "-i", "-b", "--fd-base"),
        deny_options=_f("-l", "--lib", "--faked", "-f"),
        read_options=_f("-i"),
        write_options=_f("-s"),
        flag_options=_f("-u", "--unknown-is-real"),
    ),
    # faketime TIME CMD: fakes the clock; --date-prog runs a program.
    "faketime": WrapperSpec(
        positionals=1,
        flag_options=_f("-m", "-f", "--exclude-monotonic", "--disable-shm"),
        deny_options=_f("--date-prog"),
        no_command_options=_f("-p"),
    ),
    # chronic CMD (moreutils): hides CMD's output unless it fails.
    "chronic": WrapperSpec(flag_options=_f("-e", "-v"), transparent=True),
    # dbus-run-session CMD: runs CMD inside a session bus; --dbus-daemon=BIN runs BIN
    # (found by this table's audit: `dbus-run-session --dbus-daemon=./x ls` ran ./x).
    "dbus-run-session": WrapperSpec(
        value_options=_f("--dbus-daemon", "--config-file"),
        deny_options=_f("--dbus-daemon"),
        read_options=_f("--config-file"),
    ),
    # xvfb-run CMD: runs CMD inside an X server.
    # -e sends the X server's errors to a file, -f keeps its auth cookie in one.
    "xvfb-run": WrapperSpec(
        value_options=_f(
            "-n",
            "--server-num",
            "-s",
            "--server-args",
            "-f",
            "--auth-file",
            "-e",
            "--error-file",
            "-p",
            "--xauth-protocol",
            "-w",
            "--wait",
        ),  # fmt: skip
        write_options=_f("-f", "-e", "--error-file", "--auth-file"),
        flag_options=_f("-a", "--auto-servernum", "-d", "--auto-display", "-l", "--listen-tcp"),
    ),
    # valgrind CMD: runs CMD under a checker. Its options are `--name=value` only; those
    # not listed here are asked.
    "valgrind": WrapperSpec(
        value_options=_f("--tool", "--log-file", "--xml-file", "--suppressions"),
        write_options=_f("--log-file", "--xml-file"),
        read_options=_f("--suppressions"),
        flag_options=_f(
            "-q",
            "--quiet",
            "-v",
            "--verbose",
            "--leak-check",
            "--show-leak-kinds",
            "--track-origins",
            "--error-exitcode",
            "--num-callers",
            "--trace-children",
            "--track-fds",
            "--errors-for-leak-kinds",
            "--show-reachable",
            "--undef-value-errors",
            "--xml",
            "--time-stamp",
            "--gen-suppressions",
        ),  # fmt: skip
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
