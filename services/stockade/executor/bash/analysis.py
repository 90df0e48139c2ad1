"""The judgement of a bash command line (SPEC EXE-6 … EXE-8).

``analyze`` parses once (parser.py), then judges every simple command, redirection and
assignment with the lists in lists.py and the path sandbox, and folds the findings into
one verdict: ALLOW only when everything is read-only and stays inside the roots, DENY when
anything is destructive, escalating, shell-spawning, obfuscated, exfiltrating or cannot be
parsed, ASK for everything else.
"""

from __future__ import annotations

import fnmatch
import glob as globmod
import itertools
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from stockade.contract.shell import MAX_COMMAND_CHARS
from stockade.executor.bash import lists
from stockade.executor.bash.braces import MAX_BRACE_GROUPS, MAX_BRACE_WORDS
from stockade.executor.bash.explain import Finding, explain, risk_of
from stockade.executor.bash.filevars import FILE_VARIABLES, written_file
from stockade.executor.bash.options import (
    canonical,
    literal,
    option_value,
    split_arguments,
    split_option,
    until,
)
from stockade.executor.bash.parser import ParsedScript, RawCommand, Word, parse
from stockade.executor.bash.patterns import (
    SECRET_BASENAMES,
    brace_expand,
    compile_globs,
    credential_patterns,
)
from stockade.executor.bash.programs import awk_effects, sed_effects
from stockade.executor.confine.env import command_env
from stockade.executor.paths import GIT_LAYOUT_MARKERS, PathSandbox, Root

__all__ = ["BashAnalysis", "SimpleCommand", "analyze"]

Verdict = Literal["allow", "ask", "deny"]
Risk = Literal["low", "medium", "high"]

# A glob inside the roots is expanded to check what it really names (a symlink planted in
# the workspace); past this many matches the command is asked about instead.
_MAX_GLOB_MATCHES = 256
# ... and at most this many globs are expanded per command line (bounds the time taken).
_MAX_GLOBS = 32

_VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class SimpleCommand:
    """One simple command after normalisation (DEC-1, DEC-2)."""

    name: str
    """Normalised command name: wrappers and ``VAR=x`` looked through, path reduced to its
    basename (``/tmp/git`` → ``git``, ``env X=1 nice git`` → ``git``)."""
    argv: tuple[str, ...]
    """The words after the name (quote-removed where static, source text otherwise)."""
    text: str
    """``name`` and ``argv`` joined by spaces: what rules like ``run_bash(git status*)``
    match per sub-command."""


@dataclass(frozen=True)
class BashAnalysis:
    """The structured result of judging one command line (EXE-8)."""

    verdict: Verdict
    """allow / ask / deny."""
    reasons: tuple[str, ...]
    """Every finding, most severe first (empty for allow)."""
    commands: tuple[SimpleCommand, ...]
    """Every simple command in every position, in source order (wrapped ones included)."""
    paths_read: tuple[str, ...]
    """Canonical paths the command reads (as far as its arguments tell)."""
    paths_written: tuple[str, ...]
    """Canonical paths the command writes."""
    needs_network: bool
    """Whether it uses the network."""
    read_only: bool
    """Whether it has no side effects at all."""
    risk: Risk
    """LOW / MEDIUM / HIGH (DEC-10)."""
    explanation: str
    """One sentence for a human (DEC-10)."""
    bypass_immune: bool
    """An ASK that neither allow rules nor bypass mode may settle (reads outside the roots,
    paths only known at run time)."""


_DEFAULT_SANDBOXES: dict[str, PathSandbox] = {}


def _default_sandbox() -> PathSandbox:
    """Without a sandbox, the working directory is the only (writable) root."""
    cwd = os.getcwd()
    sandbox = _DEFAULT_SANDBOXES.get(cwd)
    if sandbox is None:
        sandbox = PathSandbox([Root(cwd, True)], cwd)
        _DEFAULT_SANDBOXES.clear()
        _DEFAULT_SANDBOXES[cwd] = sandbox
    return sandbox


def _short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _word_text(word: Word) -> str:
    return word.value if word.value is not None else word.text


class _Judge:
    """Judges one parsed script; holds the findings while it goes."""

    def __init__(
        self,
        sandbox: PathSandbox,
        network_enabled: bool,
        denied_read_globs: Sequence[str],
        parsed: ParsedScript,
    ) -> None:
        self.sandbox = sandbox
        self.network_enabled = network_enabled
        self.denied_read_globs = tuple(denied_read_globs)
        self.parsed = parsed
        self.functions = frozenset(parsed.functions)
        self.home = os.path.expanduser("~")
        self.findings: list[Finding] = []
        self.commands: list[SimpleCommand] = []
        self.reads: dict[str, None] = {}
        self.writes: dict[str, None] = {}
        self.needs_network = False
        self.side_effects = False
        self.bases: list[str] = [sandbox.cwd]
        self.runtime_values: list[str] = []
        self.globs_expanded = 0
        self.export_all = False
        self.judged_names: set[tuple[str, str | None, bool]] = set()
        self.static_values: dict[str, list[str] | None] | None = None
        self.integer_names: set[str] = set()
        self.judged_paths: dict[tuple[str, str | None, bool, int], str | None] = {}
        self.current = ""
        self._credentials = credential_patterns(self.home)
        self._credential_re = compile_globs(self._credentials)
        self._denied_re = compile_globs(self.denied_read_globs) if denied_read_globs else None

    # --- findings ----------------------------------------------------------------------

    def deny(self, reason: str) -> None:
        self.findings.append(Finding("deny", reason, "high", False, self.current))

    def ask(self, reason: str, risk: Risk = "medium", *, immune: bool = False) -> None:
        self.findings.append(Finding("ask", reason, risk, immune, self.current))

    def effect(self, reason: str, risk: Risk = "medium", *, immune: bool = False) -> None:
        """An ASK because the command changes something (it is not read-only)."""
        self.side_effects = True
        self.ask(reason, risk, immune=immune)

    # --- the script --------------------------------------------------------------------

    def run(self) -> None:
        self.shell_options()
        for raw in self.parsed.commands:
            self.command(raw)
        self.current = ""
        for redirect in self.parsed.redirects:
            self.redirect(redirect.op, redirect.target)
        for assignment in self.parsed.assignments:
            value = assignment.value.value if assignment.value is not None else None
            exported = assignment.kind in ("prefix", "export")
            self.assignment(assignment.name, value, exported=exported)
        for text in dict.fromkeys(self.parsed.evaluated_texts):
            self.deny(f"the text {_short(text, 40)!r} is evaluated by bash as code later")
        for name in dict.fromkeys(self.parsed.recursive_functions):
            self.deny(f"function {name!r} calls itself (fork-bomb shape)")
        self.arithmetic()
        self.file_variables()
        self.git_layouts()

    def file_variables(self) -> None:
        """Assignments of variables that name a file programs write (EXE-8e)."""
        for assignment in self.parsed.assignments:
            self.file_variable(assignment.name, assignment.value)

    def file_variable(self, name: str, value: Word | None) -> None:
        """``GIT_TRACE=/path``, ``HISTFILE=...``: a write of the file named, judged by the
        path sandbox like a redirection."""
        if name.upper() not in FILE_VARIABLES and written_file(name, "x") is None:
            return
        if value is None or value.value is None:
            if value is not None:
                self.effect(
                    f"sets {name}, which names a file, to a value only known at run time",
                    "high",
                    immune=True,
                )
            return
        target = written_file(name, value.value)
        if target is None:
            return
        if self.path(literal(target), write=True, what=f"{name}= makes programs write") is not None:
            self.effect(f"{name}={_short(target, 40)} makes programs write that file", "low")

    def git_layouts(self) -> None:
        """Writes of one command line that together lay out a git directory
        (``mkdir -p r/objects r/refs; touch r/HEAD``): each alone passes the sandbox's
        check, which sees the tree as it is before the command runs."""
        if not self.sandbox.protects_git or len(self.writes) < 2:
            return
        entries: dict[str, set[str]] = {}
        for written in self.writes:
            here = written
            while self.sandbox.root_for(here) is not None:
                parent = os.path.dirname(here)
                if parent == here:
                    break
                entries.setdefault(parent, set()).add(os.path.basename(here))
                here = parent
        for parent, names in entries.items():
            markers = names & GIT_LAYOUT_MARKERS
            if not markers:
                continue
            present = {m for m in GIT_LAYOUT_MARKERS if os.path.lexists(os.path.join(parent, m))}
            if len(markers | present) >= 2:
                self.deny(
                    f"writes {', '.join(sorted(markers))} in {parent}: together they lay out a "
                    "git directory (a bare repository git would read config and hooks from)"
                )
                return

    def arithmetic(self) -> None:
        """Arithmetic on a value that is not a literal number runs the code in its array
        subscripts (``y='a[$(cmd)]'; echo $((y))``, EXE-8b): every variable bash evaluates
        as arithmetic or as a name must hold a value known here without ``$``/backticks."""
        names = dict.fromkeys((*self.parsed.arithmetic_names, *self.integer_names))
        if not names:
            return
        dynamic = set(self.runtime_values)
        values: dict[str, list[str]] = {}
        for assignment in self.parsed.assignments:
            if assignment.value is None or assignment.value.value is None:
                dynamic.add(assignment.name)
            else:
                values.setdefault(assignment.name, []).append(assignment.value.value)
        for name in names:
            if name.isdigit() or name in ("_", "@", "*"):
                self.ask(
                    f"evaluates ${name} as arithmetic: a positional parameter or $_ holds "
                    "text from elsewhere (a value like a[$(cmd)] would run cmd)",
                    "high",
                    immune=True,
                )
                return
            if name in dynamic:
                self.ask(
                    f"evaluates ${name} as arithmetic or as a variable name, but its value is "
                    "only known at run time (a value like a[$(cmd)] would run cmd)",
                    "high",
                    immune=True,
                )
                return
            for value in values.get(name, ()):
                self.arithmetic_text(value, name)

    def arithmetic_text(self, text: str, name: str) -> None:
        """A static ``text`` bash evaluates as arithmetic: code in a subscript runs."""
        if _LITERAL_NUMBER.match(text) or not any(c in text for c in "$`"):
            return
        self.deny(
            f"the value {_short(text, 30)!r} of {name} is evaluated as arithmetic, which runs "
            "the command substitutions in its subscripts"
        )

    def shell_options(self) -> None:
        """``set -a`` exports every later assignment; ``set -k`` moves ``NAME=value`` words
        after a command name into its environment, where the analysis cannot follow them
        (EXE-8b): the first is taken into account, the second refused."""
        for raw in self.parsed.commands:
            if raw.name.value not in ("set", "shopt") or raw.name.quoted:
                continue
            self.current = _short(" ".join([raw.name.text, *(a.text for a in raw.args)]))
            values = [a.value for a in _expanded(raw.args)]
            shopt = raw.name.value == "shopt"
            option_names: list[str | None] = []
            takes_name = False
            for value in values:
                if takes_name:
                    option_names.append(value)
                    takes_name = False
                    continue
                if value is None:
                    self.ask(f"{raw.name.value} with an option only known at run time", immune=True)
                    continue
                if value == "--" and not shopt:
                    break  # the rest are positional parameters
                if value.startswith("-") and len(value) > 1:
                    letters = value[1:]
                    if shopt:
                        if "o" in letters:
                            # `shopt -s -o keyword`: the names are set -o names.
                            option_names.extend(v for v in values if v and v[0] not in "-+")
                        continue
                    takes_name = "o" in letters
                    if "k" in letters:
                        option_names.append("keyword")
                    if "a" in letters:
                        option_names.append("allexport")
                elif value.startswith("+") and not shopt:
                    if "o" in value[1:]:
                        takes_name = True
                        option_names.append(None)
                elif not shopt:
                    break  # `set x y`: positional parameters
            turning_off = False
            for option in option_names:
                if option is None:
                    turning_off = True
                    continue
                if turning_off:
                    turning_off = False
                    continue
                if option == "keyword":
                    self.deny(
                        f"{raw.name.value} -k (keyword) moves NAME=value words after a command "
                        "into its environment, which the analysis cannot follow"
                    )
                elif option == "allexport":
                    self.export_all = True
        self.current = ""

    def assignment(self, name: str, value: str | None = None, *, exported: bool = True) -> None:
        """Judge setting the variable ``name`` (EXE-8b rev 2: an allow-list of what a command
        may set; anything else asks, variables that make commands run other code deny).

        ``exported``: it reaches the environment of commands (a ``X=1 cmd`` prefix, ``env``,
        ``export``, ``declare -x``). A plain ``x=1`` only sets a shell variable, which matters
        only for the variables bash itself reads, the ones already in the command's
        environment, and everything after ``set -a``."""
        key = (name, value, exported)
        if key in self.judged_names:
            return  # `export X=1` is seen as an argument and as an assignment
        self.judged_names.add(key)
        verdict = lists.env_verdict(name, value)
        if verdict == "allow":
            return
        if verdict == "deny":
            self.deny(f"sets {name}, which makes ordinary commands run other code")
            return
        if (
            not exported
            and not self.export_all
            and name not in lists.SHELL_SPECIAL_VARS
            and name not in _EXECUTOR_ENV
        ):
            return
        place = "bash's own" if name in lists.SHELL_SPECIAL_VARS else "the environment's"
        self.ask(
            f"sets {name} ({place} variable): only harmless variables (LANG, LC_*, TZ, "
            "COLUMNS, NO_COLOR ...) may be set without asking",
            "medium",
        )

    def redirect(self, op: str, target: Word | None) -> None:
        if target is None or op in ("<<", "<<<"):
            return
        value = target.value
        if op in (">&", "<&") and value is not None and (value.isdigit() or value == "-"):
            return  # fd duplication or closing (2>&1, >&-)
        if op in ("<", "<&"):
            self.path(target, write=False)
            return
        if self.path(target, write=True, what="redirects output to") is not None:
            self.effect(f"redirects output to {_word_text(target)}", "low")

    # --- one simple command ----------------------------------------------------------------

    def command(self, raw: RawCommand) -> None:
        self.current = _short(" ".join([raw.name.text, *(a.text for a in raw.args)]))
        # Prefix assignments (`X=1 cmd`) are judged with all the others in run().
        if raw.name.braces:
            # `{rm,-rf,x}` is `rm -rf x` to bash: obfuscation, refused; recorded as bash
            # will run it.
            words = _expanded([raw.name, *raw.args])
            self.deny(f"brace expansion in command position {raw.name.text!r}")
            self.record(_word_text(words[0]), words[1:])
            return
        resolved = self.resolve_name(raw.name)
        args = _expanded(raw.args)
        if any(a.braces == () for a in raw.args):
            self.deny(
                f"a brace expansion makes more than {MAX_BRACE_WORDS} words or has more than "
                f"{MAX_BRACE_GROUPS} braces (refused, not judged word by word)"
            )
        if resolved is None:
            self.record(_word_text(raw.name), args)
            return
        name, by_path = resolved
        for variant in self.variants(args):
            self.glob_options(variant)
            self.words(name, by_path, variant, raw, stdin_args=False)

    def variants(self, args: list[Word]) -> list[list[Word]]:
        """``args`` with each ``$f``/``"$f"`` whose every value is known here (a loop over
        static words: ``for f in a.txt b.txt; do wc -l "$f"; done``) replaced by each value
        in turn; ``[args]`` when there is none or too many combinations."""
        if all(a.value is not None for a in args):
            return [args]
        choices: list[tuple[int, list[Word]]] = []
        combinations = 1
        for k, word in enumerate(args):
            if word.value is not None:
                continue
            match = _SIMPLE_REFERENCE.fullmatch(word.text)
            if match is None:
                continue
            quoted = word.text.startswith('"')
            values = self.known_values(match.group(1) or match.group(2), quoted)
            if values is None:
                continue
            choices.append((k, values))
            combinations *= len(values)
        if not choices or combinations > _MAX_VARIANTS:
            return [args]
        out: list[list[Word]] = []
        for picked in itertools.product(*(values for _, values in choices)):
            variant = list(args)
            for (k, _), word in zip(choices, picked, strict=True):
                variant[k] = word
            out.append(variant)
        return out

    def known_values(self, name: str, quoted: bool) -> list[Word] | None:
        """The words ``$name`` can become, when the script gives every value it can hold."""
        if self.static_values is None:
            self.static_values = _static_values(self.parsed)
        values = self.static_values.get(name)
        if not values or name in self.runtime_values:
            return None
        if not quoted and "IFS" in self.static_values:
            return None  # the script changes how unquoted values split
        words: list[Word] = []
        for value in values:
            if not quoted and (not value or any(c in value for c in " \t\n")):
                return None  # word splitting: one value, several words (or none)
            glob = not quoted and any(c in value for c in "*?[")
            words.append(Word(value, value, quoted, False, glob))
        return words

    def glob_options(self, args: list[Word]) -> None:
        """An unquoted glob that starts with a wildcard (``*``, ``?x``, ``[-]*``) can expand
        to a word starting with ``-``, which the command reads as an option (a file named
        ``-delete`` turns ``find *`` into a deletion): look at what it expands to now, and
        ask when any match starts with ``-`` (EXE-8c)."""
        for word in args:
            if word.value == "--":
                return
            value = word.value
            if not word.glob or value is None or not value or value[0] not in "*?[":
                continue
            if "/" in value.rstrip("/"):
                head = value.split("/", 1)[0]
                if not any(c in head for c in "*?["):
                    continue
            self.globs_expanded += 1
            if self.globs_expanded > _MAX_GLOBS:
                self.ask("too many globs to check each of them", immune=True)
                return
            for base in dict.fromkeys(self.bases):
                pattern = os.path.join(globmod.escape(base), value)
                for match in itertools.islice(globmod.iglob(pattern), _MAX_GLOB_MATCHES):
                    relative = os.path.relpath(match, base)
                    if relative.startswith("-"):
                        self.ask(
                            f"the glob {value} expands to {relative!r}, which the command "
                            "reads as an option",
                            "high",
                            immune=True,
                        )
                        return

    def resolve_name(self, word: Word) -> tuple[str, bool] | None:
        """Normalise a command-name word; None (after a DENY) when it is obfuscated."""
        value = word.value
        if value is None:
            self.deny("a variable or substitution in command position hides the command")
            return None
        if word.quoted:
            self.deny(f"quoted or escaped command name {word.text!r} (obfuscation)")
            return None
        if word.glob:
            self.deny(f"glob or brace expansion in command position {word.text!r}")
            return None
        if not value:
            self.deny("empty command name")
            return None
        if "/" in value:
            base = value.rstrip("/").rsplit("/", 1)[-1]
            directory = os.path.dirname(value) or "/"
            return base, os.path.normpath(directory) not in lists.SYSTEM_BIN_DIRS
        return value, False

    def record(self, name: str, args: Sequence[Word]) -> None:
        argv = tuple(_word_text(a) for a in args)
        self.commands.append(SimpleCommand(name, argv, " ".join((name, *argv))))

    def words(
        self, name: str, by_path: bool, args: list[Word], raw: RawCommand, *, stdin_args: bool
    ) -> None:
        """Judge ``name args``: look through wrappers, then dispatch on the command."""
        while name in lists.WRAPPERS and not by_path:
            spec = lists.WRAPPERS[name]
            if spec.assignments:
                # `env -i GIT_TRACE=/path git status`: the file the variable names (EXE-8e).
                skip = False
                for word in args:
                    text = word.value
                    if skip or (text is not None and text.startswith("-") and text != "-"):
                        skip = not skip and text in spec.value_options
                        continue
                    if text is None or "=" not in text:
                        break
                    var, _, assigned = text.partition("=")
                    if not _VAR_NAME.match(var):
                        break
                    self.file_variable(var, literal(assigned))
            unwrapped = self.unwrap(name, args)
            if unwrapped is None:
                self.record(name, args)
                return
            inner, stdin = unwrapped
            if not inner:
                break  # the wrapper alone (`env`, `command -v x`, `exec >log`)
            resolved = self.resolve_name(inner[0])
            if resolved is None:
                self.record(_word_text(inner[0]), inner[1:])
                return
            name, by_path = resolved
            args = inner[1:]
            stdin_args = stdin_args or stdin
        self.record(name, args)
        self.dispatch(name, by_path, args, raw, stdin_args)

    def unwrap(self, name: str, args: list[Word]) -> tuple[list[Word], bool] | None:
        """The wrapped command's words ([] for the wrapper alone); None after a DENY."""
        spec = lists.WRAPPERS[name]
        if name == "setsid":
            # A new session leaves the call's process group: the executor's group kill on
            # timeout or cancel no longer reaches it.
            self.ask("setsid detaches the command from the call's process group", "medium")
        takes_value = spec.value_options | spec.chdir_options | spec.read_options
        positionals = spec.positionals
        i = 0
        while i < len(args):
            word = args[i]
            value = word.value
            if value is None:
                break
            if value == "--":
                i += 1
                break
            if name == "env" and value == "-":
                i += 1  # `env -` is `env -i` (an empty environment), not a command
                continue
            if spec.assignments and "=" in value and not value.startswith("-"):
                # env takes any word with `=` as an assignment, valid shell name or not
                # (`BASH_FUNC_ls%%=() { ...; }` defines a function for a bash child).
                var, _, assigned = value.partition("=")
                self.assignment(var, assigned)
                i += 1
                continue
            if value.startswith("-") and value != "-":
                option, attached = split_option(value, takes_value)
                if not value.startswith("--") and attached is None:
                    # A bundle of short flags (`time -ao FILE`): the first letter that
                    # takes a value takes the rest of the bundle, or the next word.
                    for at in range(1, len(value)):
                        if "-" + value[at] in takes_value | spec.deny_options:
                            option = "-" + value[at]
                            attached = value[at + 1 :] or None
                            break
                option = canonical(
                    option, (spec.deny_options, spec.no_command_options, takes_value)
                )
                if option in spec.deny_options:
                    self.deny(f"{name} {option} runs a string as a command")
                    return None
                if option in spec.no_command_options:
                    return [], False
                operand: Word | None = None
                step = 1
                if option in takes_value:
                    if attached is not None:
                        operand = literal(attached)
                    elif i + 1 < len(args):
                        operand = args[i + 1]
                        step = 2
                if operand is not None and option in spec.chdir_options:
                    self.change_dir(operand)
                if operand is not None and option in spec.read_options:
                    self.path(operand, write=False)
                if operand is not None and option in spec.write_options:
                    self.path(operand, write=True, what=f"{name} {option} writes")
                    self.effect(f"{name} {option} writes a file", "low")
                i += step
                continue
            if positionals > 0:
                if spec.positionals - positionals < spec.write_positionals and not value.isdigit():
                    # `flock FILE CMD` creates FILE (a number is a file descriptor).
                    if self.path(word, write=True, what=f"{name} opens for writing") is not None:
                        self.effect(f"{name} creates or opens {_word_text(word)}", "low")
                positionals -= 1
                i += 1
                continue
            break
        return args[i:], spec.stdin_args

    def dispatch(
        self, name: str, by_path: bool, args: list[Word], raw: RawCommand, stdin_args: bool
    ) -> None:
        if name in lists.VARIABLE_BUILTINS and not by_path:
            if not self.variable_builtin(name, args):
                return
        if name in lists.SHELLS:
            self.deny(f"{name} spawns a shell, whose commands cannot be checked (EXE-6)")
        elif name in lists.EVAL_COMMANDS:
            self.eval_command(name, args)
        elif name in lists.DENY_COMMANDS:
            self.deny(lists.DENY_COMMANDS[name])
        elif name in lists.NETWORK_COMMANDS:
            self.scan_credentials(args)
            self.output_options(name, args)  # `curl -o ~/.bashrc URL` (EXE-8e)
            if name in ("rsync", "scp", "sftp") and args:
                # A local destination (no `host:`) is written like `cp`'s.
                operands = [w for w in args if w.value is None or not w.value.startswith("-")]
                last = operands[-1] if len(operands) >= 2 else None
                if last is not None and last.value is not None and ":" not in last.value:
                    self.path(last, write=True, what=f"{name} copies to")
            self.network(f"{name} {lists.NETWORK_COMMANDS[name]}")
        elif by_path:
            self.scan_credentials(args)
            self.effect(f"runs the program {name!r} from a path, which can do anything")
        elif name == "git":
            self.git(args)
        elif name in lists.INTERPRETERS:
            self.interpreter(name, args, raw)
        elif name in self.functions:
            pass  # the function's body is judged where it is defined
        elif name in lists.SAFE_COMMANDS:
            self.safe(name, lists.SAFE_COMMANDS[name], args, stdin_args)
        elif name in lists.WRITE_COMMANDS:
            if stdin_args:
                self.effect(f"{name} gets its targets from stdin (xargs)", "high", immune=True)
            self.write_command(name, lists.WRITE_COMMANDS[name], args)
        elif name in lists.PACKAGE_MANAGERS:
            self.scan_credentials(args)
            self.output_options(name, args)  # `gcc -o /usr/local/bin/x`, `pip -t DIR`
            self.package_manager(name, args)
        else:
            self.scan_credentials(args)
            self.output_options(name, args)
            if name == "history":
                self.history(args)
            self.effect(f"{name!r} is not on the read-only list; it may change things")

    def history(self, args: list[Word]) -> None:
        """``history -w FILE`` / ``-a FILE`` write the history to FILE (``-r``/``-n``
        read it); without FILE they use HISTFILE, judged where it is set."""
        flags = "".join(
            w.value[1:] for w in args if w.value and w.value.startswith("-") and w.value != "-"
        )
        operands = [w for w in args if w.value is None or not w.value.startswith("-")]
        if not operands:
            return
        if set(flags) & set("aw"):
            self.path(operands[0], write=True, what="history writes")
        elif set(flags) & set("rn"):
            self.path(operands[0], write=False)

    def output_options(self, name: str, args: list[Word]) -> None:
        """For a command the lists do not describe: options named like an output file
        (``-o FILE``, ``--output=FILE``, ``--log-file FILE`` ...) are judged as writes, so
        a file outside the writable roots or a protected one is refused (EXE-8e)."""
        for k, word in enumerate(args):
            value = word.value
            if value is None or not value.startswith("-") or value == "-":
                continue
            if value == "--":
                return
            option, eq, attached = value.partition("=")
            target: Word | None = None
            if option in _WRITE_OPTIONS_OF.get(name, ()) and eq:
                target = literal(attached)
            elif option.startswith("--") or (option.startswith("-") and len(option) > 2 and eq):
                named = _OUTPUT_OPTION.match(option) or option in _WRITE_OPTIONS_OF.get(name, ())
                if not named and not (
                    eq and _OUTPUT_WORD.search(option) and _PATHLIKE.match(attached)
                ):
                    # Other names count only with a value that looks like a path
                    # (`--out-file=/x`, `--export=~/y`), not `--log-level=debug`.
                    continue
                target = literal(attached) if eq else (args[k + 1] if k + 1 < len(args) else None)
            elif option in _WRITE_OPTIONS_OF.get(name, ()):
                target = (
                    literal(value[len(option) :])
                    if len(value) > len(option) and not option.startswith("--")
                    else (args[k + 1] if k + 1 < len(args) else None)
                )
            elif not option.startswith("--") and len(value) > 2 and not eq:
                # A bundle of short options (`curl -fsSLo FILE`): the first letter that
                # names an output takes the rest of the bundle or the next word.
                writes = _WRITE_OPTIONS_OF.get(name, frozenset()) | (
                    frozenset() if name in _O_NOT_OUTPUT else frozenset({"-o"})
                )
                for at in range(1, len(value)):
                    if not value[at].isalnum():
                        break  # not a bundle of flags (`-I/opt/x`, `-Wno-error`)
                    if "-" + value[at] in writes:
                        rest = value[at + 1 :]
                        target = (
                            literal(rest) if rest else (args[k + 1] if k + 1 < len(args) else None)
                        )
                        break
            elif value.startswith("-o") and name not in _O_NOT_OUTPUT:
                target = (
                    literal(value[2:])
                    if len(value) > 2
                    else (args[k + 1] if k + 1 < len(args) else None)
                )
            if target is not None and target.value not in ("-", ""):
                self.path(target, write=True, what=f"{name} {option} may write")

    def variable_builtin(self, name: str, args: list[Word]) -> bool:
        """Judge the variable names a builtin sets; False after a DENY."""
        for word in args:
            value = word.value
            if value is not None and ("$(" in value or "`" in value) and name != "printf":
                self.deny(f"{name} argument {_short(value, 30)!r} is evaluated as code")
                return False
        values = [w.value for w in args]
        if name in _NAMING_BUILTINS:
            for word in args:
                if word.value is None and not _STATIC_NAME.match(word.text):
                    self.ask(
                        f"{name} gets a variable name only known at run time (a name like "
                        "a[$(cmd)] would run cmd)",
                        "high",
                        immune=True,
                    )
                    break
        if name in ("test", "[") and any(
            v in ("-v", "-R") and (k + 1 >= len(values) or values[k + 1] is None)
            for k, v in enumerate(values)
        ):
            self.ask(f"{name} -v tests a variable name only known at run time", "high", immune=True)
        if name in ("declare", "typeset", "local") and any(
            v is not None and v.startswith("-") and "n" in v[1:] for v in values
        ):
            self.deny(f"{name} -n makes a name reference (an indirect assignment)")
            return False
        targets: list[str | None] = []
        if name == "printf":
            for k, value in enumerate(values[:-1]):
                if value == "-v":
                    targets.append(values[k + 1])
        elif name in ("read", "mapfile", "readarray"):
            # Options that take a value; `read -a NAME` names the target array.
            valued = _READ_VALUED if name == "read" else _MAPFILE_VALUED
            skip = False
            for value in values:
                if skip:
                    skip = False
                elif value == "-a" and name == "read":
                    continue  # the next word is the target: taken as an operand below
                elif value is not None and value.startswith("-") and len(value) > 1:
                    skip = value[:2] in valued and len(value) == 2
                else:
                    targets.append(value)
        elif name == "getopts" and len(values) >= 2:
            targets.append(values[1])
        if name == "read" and not targets:
            targets.append("REPLY")  # `read` alone reads into REPLY
        elif name in ("mapfile", "readarray") and not targets:
            targets.append("MAPFILE")
        elif name == "wait":
            # `wait -p VAR` assigns the job's pid to VAR (a subscript in its name runs code).
            for k, value in enumerate(values[:-1]):
                if value is not None and value.startswith("-") and value.endswith("p"):
                    targets.append(values[k + 1])
        elif name == "let":
            for value in values:
                if value is not None:
                    self.integer_names.update(_IDENTIFIER.findall(value))
        self.runtime_values.extend(t.split("[", 1)[0] for t in targets if t is not None)
        for target in targets:
            if target is None:
                self.deny(f"{name} assigns a variable whose name is only known at run time")
                return False
            base = target.split("[", 1)[0]
            if "[" in target and ("$" in target or "`" in target):
                self.deny(f"{name} assigns {target!r}, whose subscript is evaluated as code")
                return False
            before = len(self.findings)
            self.assignment(base, None, exported=False)
            if len(self.findings) > before:
                return False
        if name in _DECLARATION_BUILTINS:
            return self.declaration(name, args)
        if name == "compgen":
            return self.compgen(args)
        return True

    def declaration(self, name: str, args: list[Word]) -> bool:
        """``export``/``declare``/``local``/``readonly``/``typeset`` assign every argument of
        the form NAME=value, quoted or not (``export 'GIT_CONFIG_COUNT=1'``, ``declare
        "X=y"``, a brace expansion ``export {PATH,X}=/tmp``): judge each (EXE-8b)."""
        flags = "".join(
            w.value[1:]
            for w in args
            if w.value is not None and w.value.startswith("-") and len(w.value) > 1
        )
        exported = name == "export" or "x" in flags
        if "f" in flags and (exported or name == "export"):
            self.ask(f"{name} -f exports a function to the programs it runs", "high")
        integer = "i" in flags
        for word in args:
            value = word.value
            if value is None:
                # `local -i y="$1"`: an integer variable with a value known at run time.
                match = _DECLARED.match(word.text)
                if match is not None and match.group(2) and integer:
                    self.integer_names.add(match.group(1))
                    self.runtime_values.append(match.group(1))
                continue  # otherwise asked about above (a name only known at run time)
            if value.startswith(("-", "+")) and len(value) > 1:
                continue
            match = _DECLARED.match(value)
            if match is None:
                self.deny(f"{name} argument {_short(value, 30)!r} is not a variable name")
                return False
            var = match.group(1)
            assigned = value[match.end() :] if match.group(2) else None
            if integer:
                self.integer_names.add(var)
            if assigned is not None and integer and not _LITERAL_NUMBER.match(assigned):
                self.arithmetic_text(assigned, var)
            self.assignment(var, assigned, exported=exported)
        return True

    def compgen(self, args: list[Word]) -> bool:
        """``compgen -W WORDS`` / ``-X PATTERN`` expand their text again at run time, with
        command substitution: ``compgen -W '$(id)'`` runs id (EXE-8b)."""
        for k, word in enumerate(args):
            value = word.value
            if value is None or not value.startswith("-") or value == "--":
                continue
            letters = value[1:]
            for option in ("W", "X", "G", "P", "S"):
                if option not in letters:
                    continue
                position = letters.index(option)
                attached = letters[position + 1 :]
                text: str | None = attached if attached else None
                if not attached:
                    text = args[k + 1].value if k + 1 < len(args) else ""
                if text is None or any(c in text for c in "$`"):
                    self.deny(f"compgen -{option} expands its words again (code in them runs)")
                    return False
        return True

    # --- categories ------------------------------------------------------------------------

    def network(self, reason: str) -> None:
        self.needs_network = True
        if self.network_enabled:
            self.effect(f"{reason} (uses the network)", "high")
        else:
            self.deny(f"{reason}; network access is disabled")

    def eval_command(self, name: str, args: list[Word]) -> None:
        if name not in ("source", "."):
            self.deny(lists.EVAL_COMMANDS[name])
            return
        target = args[0] if args else None
        if target is None or target.value is None or target.value in ("-", "/dev/stdin"):
            self.deny(f"{name} of downloaded or generated content cannot be checked")
            return
        self.path(target, write=False)
        self.effect(f"runs the commands in {target.value} in this shell", "high")

    def interpreter(self, name: str, args: list[Word], raw: RawCommand) -> None:
        spec = lists.INTERPRETERS[name]
        language = spec.language
        i = 0
        info = False
        while i < len(args):
            word = args[i]
            value = word.value
            if value is None:
                self.effect(f"runs a {language} program chosen at run time", "high", immune=True)
                return
            if value == "-":
                break
            option = value if value.startswith("--") else value[:2]
            if value.startswith("-") and option in spec.inline_options:
                self.effect(f"runs inline {language} code", "high")
                return
            if value in spec.inline_options:  # `deno eval CODE`
                self.effect(f"runs inline {language} code", "high")
                return
            if value.startswith("-") and option in spec.module_options:
                module = value[2:] or (_word_text(args[i + 1]) if i + 1 < len(args) else "")
                phrase = lists.PACKAGE_MANAGERS.get(module)
                if phrase is not None:
                    self.package_manager(module, args[i + 2 :] if not value[2:] else args[i + 1 :])
                else:
                    self.effect(f"runs the {language} module {module!r}")
                return
            if value.startswith("-") and len(value) > 1:
                if value in lists.INTERPRETER_INFO_FLAGS:
                    info = True
                i += 2 if value in spec.value_options else 1
                continue
            self.scan_credentials(args[i + 1 :])
            self.path(word, write=False)
            self.effect(f"runs the {language} program {value}, which can do anything")
            return
        if info and i >= len(args):
            return  # `python --version`
        if any(r.op in ("<<", "<<<") for r in raw.redirects):
            self.effect(f"runs inline {language} code from a here-document", "high")
            return
        self.deny(
            f"{name} without a program file reads its program from stdin "
            "(the download-and-execute shape)"
        )

    def package_manager(self, name: str, args: list[Word]) -> None:
        sub = next((a.value for a in args if a.value and not a.value.startswith("-")), "")
        network = lists.NETWORK_SUBCOMMANDS.get(name)
        if network is not None and (not network or sub in network):
            self.needs_network = True
        phrase = lists.PACKAGE_MANAGERS[name]
        self.effect(phrase, "medium")

    # --- read-only commands ----------------------------------------------------------------

    def safe(self, name: str, spec: lists.SafeSpec, args: list[Word], stdin_args: bool) -> None:
        if name in ("find",):
            self.find(args)
            return
        if name == "sed":
            self.sed(args)
            return
        if name in ("awk", "gawk", "mawk", "nawk"):
            self.awk(args)
            return
        if name in ("cd", "pushd"):
            self.cd(args)
            return
        if name == "popd":
            return
        if name == "jq":
            args = self.jq_named_files(args)
        operands, pattern_given = self.options(name, spec, args)
        if name == "hostname" and operands:
            self.deny("hostname NAME changes the machine's host name")
            return
        if name == "xxd" and len(operands) >= 2:
            self.path(operands[0], write=False)
            if self.path(operands[1], write=True, what="writes") is not None:
                self.effect(f"writes {_word_text(operands[1])}", "low")
            return
        if name == "tee":
            for word in operands:
                if self.path(word, write=True, what="writes") is not None:
                    self.effect(f"writes {_word_text(word)}", "low")
            return
        if name == "uniq" and len(operands) >= 2:
            self.path(operands[0], write=False)
            if self.path(operands[1], write=True, what="writes") is not None:
                self.effect(f"writes {_word_text(operands[1])}", "low")
            return
        kind = spec.operands
        if kind == "none":
            return
        if kind in ("pattern_then_paths", "filter_then_paths") and not pattern_given:
            operands = operands[1:]
        if name == "jq":
            operands = until(operands, ("--args", "--jsonargs"))
        if stdin_args:
            self.ask(f"{name} gets file names from stdin (xargs), which cannot be checked")
        for word in operands:
            self.path(word, write=False)

    def jq_named_files(self, args: list[Word]) -> list[Word]:
        """jq's ``--rawfile NAME FILE`` / ``--slurpfile NAME FILE`` take two arguments:
        judge FILE, and drop both so the rest parses as usual (``--arg NAME VALUE`` too)."""
        out: list[Word] = []
        i = 0
        while i < len(args):
            value = args[i].value
            if value in ("--rawfile", "--slurpfile"):
                if i + 2 < len(args):
                    self.path(args[i + 2], write=False)
                i += 3
                continue
            if value in ("--arg", "--argjson"):
                i += 3
                continue
            out.append(args[i])
            i += 1
        return out

    def options(self, name: str, spec: lists.SafeSpec, args: list[Word]) -> tuple[list[Word], bool]:
        """Walk options (judging their values); return the operands and whether a pattern
        option (``grep -e``) was given."""
        takes_value = (
            spec.value_options | spec.read_options | spec.write_options | spec.pattern_options
        )
        known = (
            spec.deny_options,
            spec.write_options,
            spec.ask_options,
            spec.read_options,
            spec.pattern_options,
            spec.value_options,
        )
        operands, found = split_arguments(args, takes_value, known)
        pattern_given = False
        for arg in found:
            for option, operand, _ in arg.options:
                if option in spec.deny_options:
                    self.deny(f"{name} {option} runs another program")
                elif option in spec.ask_options:
                    self.effect(f"{name} {option} changes files")
                if option in spec.pattern_options:
                    pattern_given = True
                if (
                    operand is not None
                    and option.startswith("--")
                    and not any(option in k for k in known)
                    and _OUTPUT_OPTION.match(option)
                ):
                    # An option the list does not know, named like an output file
                    # (`--output=`, `--log-file=`): judged as the write it may be (EXE-8e).
                    self.path(operand, write=True, what=f"{name} {option} may write")
                    self.effect(f"{name} {option} may write {_word_text(operand)}", "low")
                    continue
                if operand is not None:
                    if option in spec.write_options:
                        self.path(operand, write=True, what=f"{name} {option} writes")
                        self.effect(f"{name} {option} writes {_word_text(operand)}", "low")
                    elif option in spec.read_options:
                        self.path(operand, write=False)
        return operands, pattern_given

    def cd(self, args: list[Word]) -> None:
        operands = [a for a in args if a.value is None or not a.value.startswith("-")]
        target = operands[0] if operands else literal("~")
        self.change_dir(target)

    def change_dir(self, target: Word) -> None:
        value = target.path_value
        if value is None:
            self.ask("changes to a directory only known at run time", immune=True)
            return
        if value == "-":
            return
        decision = self.path(target, write=False)
        if decision is not None:
            self.bases.append(decision)

    def find(self, args: list[Word]) -> None:
        i = 0
        while i < len(args) and args[i].value in ("-H", "-L", "-P", "-D"):
            i += 2 if args[i].value == "-D" else 1
        starts: list[Word] = []
        while i < len(args):
            value = args[i].value
            if value is not None and (value.startswith("-") or value in ("(", ")", "!", ",")):
                break
            starts.append(args[i])
            i += 1
        expression = args[i:]
        deletes = False
        j = 0
        while j < len(expression):
            value = expression[j].value
            nxt = expression[j + 1] if j + 1 < len(expression) else None
            if value in ("-exec", "-execdir", "-ok", "-okdir"):
                end = j + 1
                while end < len(expression) and expression[end].value not in (";", "+"):
                    end += 1
                inner = expression[j + 1 : end]
                self.effect(f"find {value} runs a command for every file found")
                saved = self.current
                if inner:
                    self.current = _short(" ".join(w.text for w in inner))
                    resolved = self.resolve_name(inner[0])
                    if resolved is None:
                        self.record(_word_text(inner[0]), inner[1:])
                    else:
                        name, by_path = resolved
                        self.words(name, by_path, list(inner[1:]), _EMPTY, stdin_args=False)
                else:
                    self.deny(f"find {value} without a command")
                self.current = saved
                j = end + 1
                continue
            if value == "-delete":
                deletes = True
            elif value in ("-fprint", "-fprint0", "-fls", "-fprintf") and nxt is not None:
                self.path(nxt, write=True, what=f"find {value} writes")
                self.effect(f"find {value} writes a file", "low")
                j += 3 if value == "-fprintf" else 2
                continue
            elif value in ("-newer", "-anewer", "-cnewer", "-samefile", "-files0-from"):
                if nxt is not None:
                    self.path(nxt, write=False)
                j += 2
                continue
            elif value is None:
                self.ask("find has an argument only known at run time", immune=True)
            j += 1
        if not starts:
            starts = [literal(".")]
        for word in starts:
            self.path(word, write=deletes, what="deletes files under")
        if deletes:
            self.effect("find -delete deletes files", "high")

    def sed(self, args: list[Word]) -> None:
        scripts: list[str] = []
        script_file = False
        in_place = False
        takes_value = frozenset({"-e", "--expression", "-f", "--file", "-l", "--line-length"})
        operands, found = split_arguments(args, takes_value, (_SED_IN_PLACE, takes_value))
        for arg in found:
            value = arg.text
            if not value.startswith("--") and "i" in value[1:].split("e")[0].split("f")[0]:
                in_place = True
            for option, operand, _ in arg.options:
                if option == "--in-place":
                    in_place = True
                if option in ("-e", "--expression") and operand is not None:
                    if operand.value is None:
                        self.ask("sed script only known at run time", immune=True)
                    else:
                        scripts.append(operand.value)
                elif option in ("-f", "--file") and operand is not None:
                    script_file = True
                    self.path(operand, write=False)
        if not scripts and not script_file:
            if not operands:
                self.deny("sed without a script")
                return
            first = operands.pop(0)
            if first.value is None:
                self.ask("sed script only known at run time", immune=True)
            else:
                scripts.append(first.value)
        if script_file:
            self.effect("sed runs a script file, which may write files or run commands")
        for script in scripts:
            effects = sed_effects(script)
            if effects.execute:
                self.deny("the sed script runs shell commands (e command or s///e)")
            if effects.unknown:
                self.effect("the sed script uses commands the analysis does not know")
            for target in effects.writes:
                self.path(literal(target), write=True, what="the sed script writes")
                self.effect(f"the sed script writes {target}")
            for source in effects.reads:
                self.path(literal(source), write=False)
        for word in operands:
            self.path(word, write=in_place, what="edits in place")
        if in_place:
            self.effect("sed -i edits files in place")

    def awk(self, args: list[Word]) -> None:
        program: str | None = None
        program_file = False
        takes_value = frozenset(
            {
                "-F",
                "-v",
                "-f",
                "-e",
                "--source",
                "-i",
                "--include",
                "-l",
                "--load",
                "-E",
                "--file",
                "--assign",
                "--field-separator",
                "--exec",
            }
        )
        operands, found = split_arguments(args, takes_value, (_AWK_DENY, takes_value))
        for arg in found:
            for option, operand, _ in arg.options:
                if option in ("-l", "--load"):
                    self.deny("awk -l loads a shared library")
                elif option in ("-f", "-E", "--file", "--exec", "-i", "--include"):
                    program_file = True
                    if operand is not None:
                        self.path(operand, write=False)
                elif option in ("-e", "--source") and operand is not None:
                    if operand.value is None:
                        self.ask("awk program only known at run time", immune=True)
                    else:
                        program = (program or "") + "\n" + operand.value
        if program is None and not program_file:
            if not operands:
                self.deny("awk without a program")
                return
            first = operands.pop(0)
            if first.value is None:
                self.ask("awk program only known at run time", immune=True)
            else:
                program = first.value
        if program_file:
            self.effect("awk runs a program file, which may write files or run commands")
        if program is not None:
            self.awk_program(program)
        for word in operands:
            if (
                word.value is not None
                and _VAR_NAME.match(word.value.split("=", 1)[0])
                and ("=" in word.value)
            ):
                continue  # `awk '...' var=value file`: an assignment, not a file
            self.path(word, write=False)

    def awk_program(self, program: str) -> None:
        """Judge an awk program from its tokens (EXE-8b: lexed, not regex-scanned)."""
        effects = awk_effects(program)
        for reason in dict.fromkeys(effects.runs):
            self.deny(f"the awk program {reason}")
        if effects.unknown:
            self.effect("the awk program has text the analysis cannot read", immune=True)
        for target in effects.writes:
            if target is None:
                self.effect("the awk program redirects output to a file named at run time",
                            "high", immune=True)  # fmt: skip
            elif self.path(literal(target), write=True, what="the awk program writes") is not None:
                self.effect(f"the awk program writes {target}", "low")
        for source in effects.reads:
            if source is None:
                self.ask("the awk program reads a file named at run time (getline <)",
                         "high", immune=True)  # fmt: skip
            else:
                self.path(literal(source), write=False)
        if effects.argv:
            self.ask(
                "the awk program changes ARGV, ARGC or ENVIRON (it reads files chosen at run time)",
                "high",
                immune=True,
            )

    # --- git -----------------------------------------------------------------------------------

    def git(self, args: list[Word]) -> None:
        i = 0
        git_dir: Word | None = None
        work_tree: Word | None = None
        while i < len(args):
            value = args[i].value
            if value is None:
                self.effect("git with an argument only known at run time", immune=True)
                return
            nxt = args[i + 1] if i + 1 < len(args) else None
            if value == "-C" and nxt is not None:
                self.change_dir(nxt)
                i += 2
                continue
            if value == "-c" or (value.startswith("-c") and not value.startswith("--")):
                setting = value[2:] if len(value) > 2 else (_word_text(nxt) if nxt else "")
                self.git_setting(setting.split("=", 1)[0], "git -c")
                i += 1 if len(value) > 2 else 2
                continue
            option = canonical(value.split("=", 1)[0], (_GIT_LONG,))
            if option in ("--git-dir", "--work-tree"):
                word = literal(value.split("=", 1)[1]) if "=" in value else nxt
                if word is not None:
                    self.path(word, write=False)
                    if option == "--git-dir":
                        git_dir = word
                    else:
                        work_tree = word
                i += 1 if "=" in value else 2
                continue
            if option in lists.GIT_DENY_OPTIONS:
                self.deny(lists.GIT_DENY_OPTIONS[option])
                return
            if value.startswith("-"):
                i += 1
                continue
            break
        if i >= len(args):
            return  # `git` alone prints help
        sub = args[i].value or ""
        rest = args[i + 1 :]
        values = [w.value for w in rest]
        if sub.startswith("credential"):
            # `git credential fill` (and the credential-* helpers) print stored secrets.
            self.deny(f"git {sub} reads or stores credentials")
            return
        for k, value in enumerate(values):
            if value is None:
                # `git show "$x"` may be `HEAD:.env`: which object it names is unknown.
                self.ask(f"git {sub} with an argument only known at run time", immune=True)
                continue
            option = canonical(value.split("=", 1)[0], (_GIT_LONG,))
            short = option if option.startswith("--") else option[:2]
            if option in _GIT_DENY_ANYWHERE:
                self.deny(lists.GIT_DENY_OPTIONS[option])
                return
            if sub == "grep" and short in ("-O", "--open-files-in-pager"):
                self.deny(lists.GIT_DENY_OPTIONS[short])
                return
            if sub in ("rebase", "difftool") and short in ("-x", "--exec"):
                self.deny(f"git {sub} {short} runs a command")
                return
            if sub == "filter-branch" and option in lists.GIT_FILTER_OPTIONS:
                self.deny(f"git filter-branch {option} runs a shell command for every commit")
                return
            if sub in ("clone", "submodule") and short in ("-c", "--config"):
                setting = value[2:] if short == "-c" and len(value) > 2 else ""
                if "=" in value and option == "--config":
                    setting = value.split("=", 1)[1]
                elif not setting and k + 1 < len(values):
                    setting = values[k + 1] or ""
                self.git_setting(setting.split("=", 1)[0], f"git {sub} {short}")
            target = self.git_option_target(sub, option, short, value, rest, k)
            if target is not None:
                kind, word = target
                if kind == "write":
                    self.path(word, write=True, what=f"git {sub} {option} writes")
                    self.effect(f"git {sub} {option} writes files", "low")
                else:
                    self.path(word, write=False)
            if option == "--no-index":
                # `git diff --no-index A B` reads any two files, not repository objects.
                for word in rest:
                    if word.value is None or not word.value.startswith("-"):
                        self.path(word, write=False)
            if sub == "help" and short in ("-w", "--web", "-i", "--info", "-m", "--man"):
                self.effect("git help opens a browser, info or man viewer")
        self.git_objects(sub, rest)
        first = next((v for v in values if v is not None and not v.startswith("-")), None)
        if sub in ("init", "clone") or (sub == "worktree" and first == "add"):
            self.git_new_repository(sub, rest)
        if sub == "bundle" and first == "create":
            operands = [w for w in rest if w.value is None or not w.value.startswith("-")]
            if len(operands) >= 2:
                self.path(operands[1], write=True, what="git bundle create writes")
        if (
            sub in lists.GIT_NETWORK_SUBCOMMANDS
            or (sub == "remote" and first in ("update", "show", "prune", "set-head"))
            or (sub == "submodule" and first in ("update", "add", "sync"))
            or (sub == "archive" and any(v and v.startswith("--rem") for v in values))
        ):
            if sub in ("fetch", "pull") or (sub == "submodule" and first in ("update", "add")):
                self.git_repository_write(sub, git_dir)
            self.network(f"git {sub} talks to a remote repository (can upload code)")
            return
        if sub == "submodule" and first == "foreach":
            self.deny("git submodule foreach runs shell commands")
            return
        if sub == "bisect" and first == "run":
            self.deny("git bisect run runs commands")
            return
        if sub == "hook":
            self.deny("git hook runs the repository's hook scripts")
            return
        if sub in lists.GIT_READ_SUBCOMMANDS and self.git_read_only(sub, values, first):
            self.scan_credentials(rest)  # `git blame --contents=~/.ssh/id_rsa`
            for word in rest:
                value = word.value
                if value is not None and value.startswith(("/", "~")):
                    self.path(word, write=False)
            return
        worktree_only = sub in ("clean", "difftool", "format-patch", "archive") or (
            sub == "apply"
            and not {"--index", "--cached", "-3", "--3way"} & set(filter(None, values))
        )
        if (
            (sub in lists.GIT_WRITE_SUBCOMMANDS or sub in lists.GIT_READ_SUBCOMMANDS)
            and sub not in ("init", "clone")
            and not worktree_only
        ):
            # Commits, refs, the index, config, stashes and objects live in the git
            # directory: a protected write (EXE-3 rev 2) unless configuration allows it.
            # (`git restore FILE` too: it locks the index.)
            self.git_repository_write(sub, git_dir)
            if work_tree is not None:
                # `git --work-tree=/elsewhere checkout .` writes the files there.
                self.path(work_tree, write=True, what=f"git {sub} writes the work tree at")
        if sub in lists.GIT_WRITE_SUBCOMMANDS:
            phrase = lists.GIT_WRITE_SUBCOMMANDS[sub]
            risky = (
                (sub == "clean" and not {"-n", "--dry-run"} & set(filter(None, values)))
                or (sub == "reset" and "--hard" in values)
                or sub == "filter-branch"
                or (sub in ("checkout", "restore") and "." in values)
            )
            self.effect(f"git {sub} {phrase}", "high" if risky else "medium")
            return
        if sub == "config":
            return  # judged in git_read_only (writes asked or denied there)
        if sub in lists.GIT_READ_SUBCOMMANDS:
            self.effect(f"git {sub} with these arguments changes the repository")
            return
        self.effect(
            f"git {sub!r} is not a known subcommand (it may be an alias or a git-{sub} program)"
        )

    def git_option_target(
        self, sub: str, option: str, short: str, value: str, rest: list[Word], k: int
    ) -> tuple[str, Word] | None:
        """("write" | "read", the file) an option of a git subcommand names, or None."""
        kind = ""
        if option in ("--output", "--output-directory", "--separate-git-dir") or (
            short == "-o" and sub in ("archive", "format-patch")
        ):
            kind = "write"
        elif option == "--prefix" and sub == "checkout-index":
            kind = "write"  # files are checked out under the prefix (any directory)
        elif (short in ("-F",) or option == "--file") and sub in _GIT_FILE_READERS:
            kind = "read"  # a message or pattern file: its content enters the repository
        elif short == "-f" and sub == "grep":
            kind = "read"
        elif option in ("--contents", "--reference", "--reference-if-able"):
            kind = "read"
        if not kind:
            return None
        if option.startswith("--") and "=" in value:
            return kind, literal(value.split("=", 1)[1])
        if not option.startswith("--") and len(value) > 2:
            return kind, literal(value[2:])
        if k + 1 < len(rest):
            return kind, rest[k + 1]
        return None

    def git_top(self) -> str:
        """The top of the repository the current directory is in (its own dir if none):
        where a ``REV:path`` starts and where ``.git`` lives."""
        here = self.bases[-1]
        probe = here
        for _ in range(64):
            if os.path.lexists(os.path.join(probe, ".git")):
                return probe
            parent = os.path.dirname(probe)
            if parent == probe:
                break
            probe = parent
        return here

    def git_repository_write(self, sub: str, git_dir: Word | None) -> None:
        """Judge a git subcommand that changes the repository as a write of its git dir."""
        target = git_dir or literal(os.path.join(self.git_top(), ".git"))
        self.path(target, write=True, what=f"git {sub} writes the repository at")

    def git_new_repository(self, sub: str, rest: list[Word]) -> None:
        """``init [DIR]``, ``clone URL [DIR]``, ``worktree add PATH``: the new repository's
        git directory (or ``.git`` file) is a protected write."""
        operands = [w for w in rest if w.value is None or not w.value.startswith("-")]
        skip_values = {"-b", "--branch", "-o", "--origin", "--template", "--separate-git-dir"}
        values = [w.value for w in rest]
        operands = [
            w
            for k, w in enumerate(rest)
            if w in operands and not (k > 0 and values[k - 1] in skip_values)
        ]
        directory: Word | None = None
        if sub == "init":
            directory = operands[0] if operands else literal(".")
        elif sub == "clone":
            if len(operands) >= 2:
                directory = operands[1]
            elif operands and operands[0].value is not None:
                name = operands[0].value.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1]
                directory = literal(name.removesuffix(".git") or "repo")
        else:  # worktree add PATH
            directory = operands[1] if len(operands) >= 2 else None
            self.git_repository_write(sub, None)
        if directory is None or directory.value is None:
            self.effect(f"git {sub} creates a repository at a place only known at run time")
            return
        bare = "--bare" in values or "--mirror" in values
        place = directory.value if bare else os.path.join(directory.value, ".git")
        self.path(directory, write=True, what=f"git {sub} creates")
        self.path(literal(place), write=True, what=f"git {sub} creates a git directory at")
        if bare and self.sandbox.protects_git:
            self.deny(f"git {sub} --bare lays out a git directory inside a writable root")

    def git_objects(self, sub: str, rest: list[Word]) -> None:
        """Object access (``REV:path``, ``:path``, pathspecs of ``show``, ``log -p``,
        ``grep``, ``archive`` ...) is judged against protected reads: the repository keeps
        a copy of every committed file, which the run-time masks cannot hide (DEC-16)."""
        top = self.git_top()
        unbounded = False
        pathspecs = False
        for word in rest:
            value = word.value
            if value is None:
                continue
            if value == "--":
                pathspecs = True
                continue
            if value.startswith("-"):
                if sub == "cat-file" and value.startswith("--batch"):
                    unbounded = True
                continue
            if sub in _GIT_CONTENT_SUBCOMMANDS and (pathspecs or ":" in value):
                # Files whose committed copy is printed are reads of that file (for the
                # policy's read rules downstream, e.g. an ASK on reading it).
                name = _git_path_candidates(value)[0]
                if name and not any(c in name for c in "*?[") and not name.startswith("/"):
                    base = top if ":" in value and not name.startswith("./") else self.bases[-1]
                    self.reads[os.path.normpath(os.path.join(base, name))] = None
            for name in _git_path_candidates(value):
                for absolute in (
                    os.path.normpath(self.absolute(name)),
                    os.path.normpath(os.path.join(top, name)),
                ):
                    if self._credential_re.match(absolute) is not None or self.denied(
                        absolute, absolute
                    ):
                        self.deny(
                            f"git {sub} {_short(value, 40)} reads {name} from the repository, "
                            "which policy denies reading"
                        )
                        return
                if (
                    sub in _GIT_CONTENT_SUBCOMMANDS
                    and any(c in name for c in "*?[")
                    and self.git_glob_denied(name)
                ):
                    self.deny(
                        f"the git pathspec {_short(name, 40)} can match a path policy denies "
                        "reading"
                    )
                    return
        if not self.denied_read_globs:
            return
        operands = [w.value for w in rest if w.value is not None and not w.value.startswith("-")]
        if sub == "cat-file" and (
            unbounded or any(":" not in v and _HEX_OBJECT.match(v) for v in operands)
        ):
            unbounded = True
        if sub == "archive" and (
            len(operands) <= 1
            or any(":" in v for v in operands)
            or any(not os.path.isfile(self.absolute(v)) for v in operands[1:] if v != "--")
        ):
            # The whole tree, a subtree (`HEAD:sub`) or a directory pathspec: it may hold
            # files the policy denies reading.
            unbounded = True
        if sub in ("fast-export", "bundle") or unbounded:
            self.ask(
                f"git {sub} can print any committed file, including ones policy denies "
                "reading (the run-time masks do not cover the object store)",
                "high",
                immune=True,
            )

    def git_glob_denied(self, pattern: str) -> bool:
        """Whether a pathspec glob could match a path the policy denies reading (compared
        by last component, both ways: ``*.env`` against ``.env``, ``.e*`` against ``.env*``)."""
        last = pattern.rstrip("/").rsplit("/", 1)[-1]
        if last.strip("*") == "":
            return False  # `*`, `**`: every file; the masks and the object-store ASK hold
        for glob in self.denied_read_globs:
            parts = [p for p in glob.split("/") if p and p != "**"]
            tail = parts[-1] if parts else ""
            if not tail or tail.strip("*") == "":
                continue
            if fnmatch.fnmatchcase(tail, last) or fnmatch.fnmatchcase(last, tail):
                return True
        return False

    def git_setting(self, key: str, how: str) -> None:
        key = key.lower()
        if not key.startswith(lists.BENIGN_GIT_CONFIG_PREFIXES):
            self.deny(f"{how} {key} can make git run commands")

    def git_read_only(self, sub: str, values: list[str | None], first: str | None) -> bool:
        """Whether this form of a possibly-read-only git subcommand only reads."""
        flags = {v for v in values if v is not None and v.startswith("-")}
        positionals = [v for v in values if v is None or not v.startswith("-")]
        if sub == "branch":
            listing = {
                "--list",
                "-l",
                "-a",
                "--all",
                "-r",
                "--remotes",
                "--show-current",
                "--contains",
                "--merged",
                "--no-merged",
                "--points-at",
            }
            writing = {
                "-d",
                "-D",
                "-m",
                "-M",
                "-c",
                "-C",
                "--delete",
                "--move",
                "--copy",
                "-u",
                "--set-upstream-to",
                "--unset-upstream",
                "--edit-description",
                "-f",
                "--force",
            }
            return not (flags & writing) and (not positionals or bool(flags & listing))
        if sub == "tag":
            listing = {"-l", "--list", "--contains", "--points-at", "--merged", "--no-merged"}
            writing = {
                "-d",
                "--delete",
                "-a",
                "-s",
                "-u",
                "-m",
                "-F",
                "-f",
                "--force",
                "--annotate",
                "--sign",
            }
            return not (flags & writing) and (not positionals or bool(flags & listing))
        if sub == "stash":
            return first in ("list", "show")  # bare `git stash` pushes
        if sub == "remote":
            return first in (None, "get-url")
        if sub == "worktree":
            return first == "list"
        if sub == "notes":
            return first in (None, "list", "show")
        if sub == "reflog":
            return first in (None, "show")
        if sub == "symbolic-ref":
            return len(positionals) <= 1 and not flags & {"-d", "--delete"}
        if sub == "submodule":
            return first in (None, "status", "summary")
        if sub == "bisect":
            return first in ("log", "view", "visualize")
        if sub == "format-patch":
            return "--stdout" in flags
        if sub == "archive":
            return not any(v and v.startswith(("-o", "--output")) for v in values)
        if sub == "fsck":
            return "--lost-found" not in flags
        if sub == "config":
            reading = {
                "--get",
                "--get-all",
                "--get-regexp",
                "--get-urlmatch",
                "--list",
                "-l",
                "--get-color",
                "--get-colorbool",
            }
            if flags & reading or first in ("get", "list"):
                return True
            names = [p for p in positionals if p is not None]
            if first == "set" and len(names) >= 2:
                names = names[1:]
            elif len(names) <= 1 and not flags & {
                "--unset",
                "--unset-all",
                "--add",
                "--replace-all",
                "--edit",
                "-e",
                "--rename-section",
                "--remove-section",
            }:
                return True  # `git config user.name` reads one key
            key = names[0] if names else ""
            self.git_setting(key, "git config")
            self.effect("git config changes the repository configuration")
            return False
        return True

    # --- writing commands ------------------------------------------------------------------

    def write_command(self, name: str, spec: lists.WriteSpec, args: list[Word]) -> None:
        if name == "kill":
            self.kill(args)
            return
        deny_options = lists.DENY_OPTIONS.get(name, {})
        takes_value = spec.value_options | spec.target_options
        deny_set = frozenset(deny_options)
        operands, found = split_arguments(args, takes_value, (deny_set, takes_value))
        targets: list[Word] = []
        flags: set[str] = set()
        for arg in found:
            value = arg.text
            long_option = canonical(value.split("=", 1)[0], (deny_set, takes_value))
            if long_option in deny_options or value in deny_options:
                self.deny(deny_options.get(long_option) or deny_options[value])
                return
            for option, operand, _ in arg.options:
                flags.add(option)
                if option in deny_options:
                    self.deny(deny_options[option])
                    return
                if operand is not None and option in spec.target_options:
                    targets.append(operand)
        if name == "dd":
            self.dd(operands)
            return
        if name == "tar":
            self.tar(args, flags, operands)
            return
        if name in ("gzip", "gunzip", "bzip2", "xz") and flags & {
            "-c",
            "--stdout",
            "-l",
            "--list",
            "-t",
            "--test",
        }:
            for word in operands:
                self.path(word, write=False)
            return
        if name == "zip" and operands:
            targets, operands = operands[:1], operands[1:]
        elif name == "unzip":
            directory = next(
                (args[k + 1] for k in range(len(args) - 1) if args[k].value == "-d"), None
            )
            listing = flags & {"-l", "-v", "-t", "-p", "-Z"}
            for word in operands[:1]:
                self.path(word, write=False)
            if not listing:
                self.path(directory or literal("."), write=True, what="unpacks into")
                self.effect("unzip unpacks files")
            return
        reads: list[Word] = []
        if spec.writes == "last":
            if targets:
                reads = operands
            elif operands:
                reads, targets = operands[:-1], operands[-1:]
        elif spec.writes in ("mode_then_paths", "owner_then_paths"):
            if not any(f.startswith("--reference") for f in flags) and operands:
                mode = operands.pop(0)
                if name == "chmod" and mode.value is not None and _setuid_mode(mode.value):
                    self.deny("chmod sets the setuid/setgid bit (privilege escalation)")
                    return
            targets = operands
        else:
            targets = targets + operands
        if name == "rm":
            self.rm_guard(targets, flags)
        if name == "mktemp" and not targets:
            self.effect("mktemp creates a temporary file", "low")
            return
        for word in reads:
            self.path(word, write=False)
        for word in targets:
            self.path(word, write=True, what=f"{name} {spec.what.split()[0]}")
        self.effect(f"{name} {spec.what}", spec.risk)

    def rm_guard(self, targets: list[Word], flags: set[str]) -> None:
        recursive = bool(flags & {"-r", "-R", "--recursive"})
        if "--no-preserve-root" in flags:
            self.deny("rm --no-preserve-root deletes the whole file system")
            return
        for word in targets:
            value = word.path_value
            if value is None or not recursive:
                continue
            path = self.absolute(self.expand(value))
            protected = {"/", self.home, *self.bases, *(r.path for r in self.sandbox.roots)}
            if os.path.normpath(path) in protected or value in ("*", "./*", "."):
                self.deny(f"rm -r {value} deletes a whole root or home directory")

    def kill(self, args: list[Word]) -> None:
        values = [a.value for a in args]
        # pid 0 is the whole process group and -1 every process we may signal; a leading
        # `-1` alone is a signal number (SIGHUP), so only later ones count.
        if "0" in values or "-1" in values[1:]:
            self.deny("kill of every process (pid -1 or 0)")
            return
        self.effect("kill sends signals to processes", "high")

    def dd(self, operands: list[Word]) -> None:
        for word in operands:
            value = word.value
            if value is None:
                self.ask("dd with an operand only known at run time", immune=True)
                continue
            key, _, target = value.partition("=")
            if key == "if" and target:
                self.path(literal(target), write=False)
            elif key == "of" and target:
                self.path(literal(target), write=True, what="dd writes")
        self.effect("dd copies raw data", "high")

    def tar(self, args: list[Word], flags: set[str], operands: list[Word]) -> None:
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
                    archive = (
                        literal(rest) if rest else (args[k + 1] if k + 1 < len(args) else None)
                    )
                    break
        directory = option_value(args, ("-C", "--directory"))
        if mode == "t":
            if archive is not None:
                self.path(archive, write=False)
            return
        if mode == "x":
            if archive is not None:
                self.path(archive, write=False)
            self.path(directory or literal("."), write=True, what="unpacks into")
            self.effect("tar unpacks files")
            return
        if archive is not None:
            self.path(archive, write=True, what="tar writes")
        self.effect("tar writes an archive")

    # --- paths -------------------------------------------------------------------------------

    def expand(self, value: str) -> str:
        if value == "~" or value.startswith("~/"):
            return self.home + value[1:]
        if value.startswith("~"):
            user, _, rest = value[1:].partition("/")
            expanded = os.path.expanduser("~" + user)
            if expanded.startswith("~"):
                expanded = "/home/" + user  # unknown user: still a home directory
            return expanded + ("/" + rest if rest else "")
        return value

    def absolute(self, value: str, base: str | None = None) -> str:
        return value if value.startswith("/") else os.path.join(base or self.bases[0], value)

    def path(self, word: Word, *, write: bool, what: str = "reads") -> str | None:
        """Judge one path operand; the canonical path when it is allowed, else None."""
        key = (word.text, word.path_value, write, len(self.bases))
        if key in self.judged_paths:
            return self.judged_paths[key]  # its findings were recorded the first time
        result = self.judge_path(word, write=write, what=what)
        self.judged_paths[key] = result
        return result

    def judge_path(self, word: Word, *, write: bool, what: str) -> str | None:
        value = word.path_value
        if word.glob and value is not None and "{" in value:
            expanded_words = brace_expand(value)
            if expanded_words is None:
                self.ask(f"brace expansion {_short(value, 30)} is too large to check", immune=True)
                return None
            if len(expanded_words) > 1 or expanded_words[0] != value:
                result: str | None = None
                for item in expanded_words:
                    result = self.path(literal(item), write=write, what=what) or result
                return result
        if value is None and word.text.startswith(("<(", ">(")):
            return None  # a process substitution: a pipe, its command is judged on its own
        if value is None:
            if write:
                self.effect(f"{what} a path only known at run time", "high", immune=True)
            else:
                self.ask(f"reads a path only known at run time ({word.text})", immune=True)
            return None
        if value in ("-", "") or value in lists.SAFE_DEVICES:
            return None
        if value.startswith(("/dev/tcp/", "/dev/udp/")):
            # bash itself opens a socket for these names: a redirection is a connection.
            self.network(f"{value} is a network connection opened by bash")
            return None
        expanded = self.expand(value)
        if word.glob and not write:
            self.glob_credentials(expanded)
        result = None
        bases = self.bases if not expanded.startswith("/") else self.bases[:1]
        for base in bases:
            absolute = self.absolute(expanded, base)
            if not self.credential_check(absolute, write):
                return None
            decision = self.sandbox.check(absolute, write=write)
            resolved = decision.resolved or absolute
            if resolved != absolute and not self.credential_check(resolved, write):
                return None
            if not decision.allowed:
                if write:
                    self.deny(f"{what} {value}: {decision.reason}")
                elif decision.root is not None:
                    self.deny(f"reads {value}: {decision.reason}")
                else:
                    self.ask(f"reads {value}: {decision.reason}", "high", immune=True)
                    self.reads[resolved] = None
                return None
            if not write and self.denied(resolved, absolute):
                self.deny(f"reads {value}, which policy denies reading")
                return None
            if decision.root is not None and not self.sandbox.inside_cwd(resolved):
                if _matches_basename(resolved, lists.CREDENTIAL_BASENAMES):
                    self.deny(f"touches {value}, a secrets file outside the workspace")
                    return None
            if write:
                self.writes[resolved] = None
            else:
                self.reads[resolved] = None
            if word.glob and not write:
                self.expand_glob(absolute, value)
            result = resolved
        return result

    def credential_check(self, absolute: str, write: bool) -> bool:
        if self._credential_re.match(absolute) is not None:
            self.deny(f"{'writes' if write else 'reads'} credentials ({absolute})")
            return False
        if not self.sandbox.roots or self.sandbox.root_for(absolute) is None:
            if SECRET_BASENAMES.match(absolute.rstrip("/").rsplit("/", 1)[-1]):
                self.deny(f"reads a secrets file outside the workspace ({absolute})")
                return False
        return True

    def denied(self, resolved: str, absolute: str) -> bool:
        if self._denied_re is None:
            return False
        return (
            self._denied_re.match(resolved) is not None
            or self._denied_re.match(absolute) is not None
        )

    def glob_credentials(self, expanded: str) -> None:
        """A glob that could name a credential file (``~/.ssh/*``, ``/etc/sh*``) is DENY."""
        absolute = self.absolute(expanded)
        for pattern in (*self._credentials, *self.denied_read_globs):
            flat = pattern.replace("**", "*")
            if fnmatch.fnmatchcase(absolute, flat) or fnmatch.fnmatchcase(flat, absolute):
                self.deny(f"the glob {expanded} can match credentials ({pattern})")
                return

    def expand_glob(self, absolute: str, value: str) -> None:
        """Check what a glob inside the roots really names (a planted symlink, a secret)."""
        self.globs_expanded += 1
        if self.globs_expanded > _MAX_GLOBS:
            if self.globs_expanded == _MAX_GLOBS + 1:
                self.ask("too many globs to check each of them", immune=True)
            return
        matches = list(itertools.islice(globmod.iglob(absolute), _MAX_GLOB_MATCHES + 1))
        if len(matches) > _MAX_GLOB_MATCHES:
            self.ask(f"the glob {value} matches too many files to check", immune=True)
            return
        for match in matches:
            decision = self.sandbox.check(match)
            if not self.credential_check(decision.resolved or match, False):
                return
            if not decision.allowed:
                self.ask(
                    f"the glob {value} reaches {match}: {decision.reason}", "high", immune=True
                )
                return
            if self.denied(decision.resolved, match):
                self.deny(f"the glob {value} matches {match}, which policy denies reading")
                return

    def scan_credentials(self, args: Sequence[Word]) -> None:
        """For commands whose arguments are not understood: refuse credential paths."""
        for word in args:
            value = word.path_value
            if value is None:
                continue
            for candidate in (value, value.partition("=")[2]):
                if candidate and ("/" in candidate or candidate.startswith("~")):
                    absolute = self.absolute(self.expand(candidate))
                    if not self.credential_check(absolute, False):
                        return
                    if self.denied(absolute, absolute):
                        self.deny(f"passes {candidate}, which policy denies reading")
                        return
                elif candidate and _matches_basename(candidate, (".env", ".env.*")):
                    absolute = self.absolute(candidate)
                    if self.denied(absolute, absolute):
                        self.deny(f"passes {candidate}, which policy denies reading")
                        return


_SED_IN_PLACE = frozenset({"--in-place"})
# Long options (and single-dash long ones such as openssl's `-out`) that name an output,
# log or history file in the tools the lists do not describe.
_OUTPUT_OPTION = re.compile(
    r"--?(o|out|output|outfile|output-file|output-document|output-dir|output-directory|"
    r"log|log-file|logfile|log-output|xml-file|save|save-file|dump|dump-file|history-file|"
    r"histfile|trace-file|report|report-file|write|write-file|target|target-directory|"
    r"dest|destination|result-file|junitxml|cov-report)\Z"
)
# Installers whose options name the directory they write into.
_PIP_TARGETS = frozenset({"-t", "--target", "--prefix", "--root", "--src", "-d", "--dest"})
_WRITE_OPTIONS_OF: dict[str, frozenset[str]] = {
    # Downloaders: where the body, headers, cookies, traces and logs go.
    "curl": frozenset(
        {
            "-o",
            "--output",
            "--output-dir",
            "-D",
            "--dump-header",
            "-c",
            "--cookie-jar",
            "--trace",
            "--trace-ascii",
            "--stderr",
            "--libcurl",
            "--etag-save",
            "--hsts",
            "--alt-svc",
        }
    ),
    "wget": frozenset(
        {
            "-O",
            "--output-document",
            "-o",
            "--output-file",
            "-a",
            "--append-output",
            "-P",
            "--directory-prefix",
            "--save-cookies",
            "--warc-file",
        }
    ),
    "csplit": frozenset({"-f", "--prefix"}),
    "pip": _PIP_TARGETS,
    "pip3": _PIP_TARGETS,
    "npm": frozenset({"--prefix", "--cache", "--pack-destination"}),
    "uv": frozenset({"--target", "--prefix", "-o"}),
}
# Words in an option's name that suggest it names a written file (with a path value).
_OUTPUT_WORD = re.compile(r"out|log|dump|save|write|export|report|hist|trace|dest|target|cookie")
_PATHLIKE = re.compile(r"[/~.]")
# Commands whose `-o` is not an output file (mount options, ssh options, formats).
_O_NOT_OUTPUT = frozenset(
    {"mount", "ssh", "scp", "sftp", "ps", "ls", "column", "pr", "join", "make", "gmake"}
)
_GIT_DENY_ANYWHERE = frozenset(
    {
        "--upload-pack",
        "--receive-pack",
        "--exec",
        "--exec-path",
        "--ext-diff",
        "--template",
        "--extcmd",
        "--config-env",
    }
)
# Subcommands whose -F/--file names a file read into the repository (message, patterns).
_GIT_FILE_READERS = frozenset({"commit", "tag", "merge", "notes", "grep", "commit-tree"})
# git subcommands that print file contents from the object store.
_GIT_CONTENT_SUBCOMMANDS = frozenset(
    {
        "show",
        "log",
        "diff",
        "grep",
        "archive",
        "blame",
        "annotate",
        "cat-file",
        "diff-tree",
        "diff-index",
        "diff-files",
        "whatchanged",
        "format-patch",
        "range-diff",
        "stash",
        "checkout",
        "restore",
    }
)
_HEX_OBJECT = re.compile(r"[0-9a-fA-F]{4,64}\Z")
_GIT_STAGE = re.compile(r"[0-3]:")


def _git_path_candidates(value: str) -> list[str]:
    """The paths a git argument may name: the word itself (a pathspec), the part after
    the first ``:`` of ``REV:path`` / ``:N:path``, without pathspec magic (``:(top)``,
    ``:!``, ``:/``)."""
    names: list[str] = []
    if ":" in value:
        rev, _, path = value.partition(":")
        if rev.startswith("(") or not rev:
            # `:(top,glob)x`, `:!x`, `:/x`, `:0:x`, `:x`
            path = value[1:]
            if path.startswith("("):
                path = path.partition(")")[2]
            if _GIT_STAGE.match(path):
                path = path[2:]
            path = path.lstrip("!^/")
        names.append(path)
    names.append(value)
    return [n for n in names if n and n not in (".", "/")]


_AWK_DENY = frozenset({"--load"})
_GIT_LONG = frozenset(
    {o for o in lists.GIT_DENY_OPTIONS if o.startswith("--")}
    | lists.GIT_FILTER_OPTIONS
    | {
        "--output",
        "--output-directory",
        "--separate-git-dir",
        "--prefix",
        "--file",
        "--config",
        "--reference",
        "--git-dir",
        "--work-tree",
        "--no-index",
        "--contents",
        "--remote",
        "--web",
        "--info",
        "--man",
    }
)

# Builtins whose arguments name variables (subscripts evaluated) or are arithmetic.
_NAMING_BUILTINS = frozenset({"declare", "typeset", "local", "export", "readonly", "let", "unset"})
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DECLARATION_BUILTINS = frozenset({"declare", "typeset", "local", "export", "readonly"})
# NAME, NAME=value, NAME+=value, NAME[sub]=value (a subscript is judged as code elsewhere).
_DECLARED = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:\[[^\]]*\])?(\+?=)?")
_LITERAL_NUMBER = re.compile(r"\s*[+-]?(?:0[xX][0-9a-fA-F]+|[0-9]+(?:#[0-9a-zA-Z@_]+)?)\s*\Z")

# Variables the executor puts in every command's environment (confine/env.py): assigning
# one, even without `export`, changes what later commands get.
_EXECUTOR_ENV = frozenset(command_env(cwd="/", tmp_dir="/"))
_STATIC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\+)?=")

_READ_VALUED = frozenset({"-d", "-i", "-n", "-N", "-p", "-t", "-u"})
_MAPFILE_VALUED = frozenset({"-d", "-n", "-O", "-s", "-u", "-C", "-c"})

_EMPTY = RawCommand(Word("", "", False, False, False), (), (), (), None)


_SIMPLE_REFERENCE = re.compile(r'"?\$(?:([A-Za-z_][A-Za-z0-9_]*)|\{([A-Za-z_][A-Za-z0-9_]*)\})"?')
_MAX_VARIANTS = 16

# Builtins that may set a variable named in their arguments.
_SETTERS = frozenset(
    {
        "read",
        "mapfile",
        "readarray",
        "getopts",
        "printf",
        "wait",
        "declare",
        "typeset",
        "local",
        "export",
        "readonly",
        "let",
        "unset",
        "compgen",
    }  # fmt: skip
)


def _static_values(parsed: ParsedScript) -> dict[str, list[str] | None]:
    """Every value each variable is given in the script, None for a variable that is also
    given one only known at run time (or appended to, or set by a builtin)."""
    values: dict[str, list[str] | None] = {}
    for assignment in parsed.assignments:
        name = assignment.name
        current = values.get(name, [])
        raw = assignment.raw
        word = assignment.value
        if (
            current is None
            or word is None
            or word.value is None
            or word.glob
            or raw.startswith((name + "+=", name + "["))
        ):
            values[name] = None
        else:
            current.append(word.value)
            values[name] = current
    for command in parsed.commands:
        if command.name.value in _SETTERS:
            for word in command.args:
                target = (word.value or word.text).split("=", 1)[0].split("[", 1)[0]
                values[target] = None
    return values


def _expanded(words: Sequence[Word]) -> list[Word]:
    """``words`` after brace expansion: each braced word replaced by its items (EXE-8c)."""
    out: list[Word] = []
    for word in words:
        if word.braces:
            out.extend(word.braces)
        else:
            out.append(word)
    return out


def _matches_basename(path: str, patterns: Sequence[str]) -> bool:
    base = path.rstrip("/").rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(base, p) for p in patterns)


def _setuid_mode(mode: str) -> bool:
    if mode.isdigit():
        # Four octal digits: the first carries setuid (4) and setgid (2).
        return len(mode) >= 4 and mode[-4] in "234567"
    return "s" in mode.split("=")[-1] or any("s" in part for part in mode.split(","))


# --- entry point ---------------------------------------------------------------------------


def analyze(
    command: str,
    *,
    sandbox: PathSandbox | None = None,
    network_enabled: bool = False,
    denied_read_globs: Sequence[str] = (),
) -> BashAnalysis:
    """Judge one bash command line (EXE-6 … EXE-8). Never raises on any input text."""
    if not command.strip():
        return _refused("empty command (EXE-6)")
    # Longer input is refused before parsing: no honest tool call is this long, and it
    # bounds the analysis time (the decision service applies the same cap).
    if len(command) > MAX_COMMAND_CHARS:
        return _refused(f"command longer than {MAX_COMMAND_CHARS} characters")
    if "\0" in command:
        return _refused("command contains a NUL byte")
    parsed = parse(command)
    if parsed.error is not None:
        return _refused(f"cannot be parsed: {parsed.error}")
    if parsed.empty:
        return _refused("empty command (EXE-6): nothing but comments or blanks")
    judge = _Judge(sandbox or _default_sandbox(), network_enabled, denied_read_globs, parsed)
    judge.run()
    return _result(judge)


def _refused(reason: str) -> BashAnalysis:
    finding = Finding("deny", reason, "high", False, "")
    return BashAnalysis(
        verdict="deny",
        reasons=(reason,),
        commands=(),
        paths_read=(),
        paths_written=(),
        needs_network=False,
        read_only=False,
        risk="high",
        explanation=explain("deny", (finding,), (), False),
        bypass_immune=False,
    )


def _result(judge: _Judge) -> BashAnalysis:
    findings = judge.findings
    verdict: Verdict = "allow"
    if any(f.verdict == "deny" for f in findings):
        verdict = "deny"
    elif findings:
        verdict = "ask"
    ordered = sorted(findings, key=lambda f: (f.verdict != "deny", _RISK_ORDER[f.risk] * -1))
    reasons = tuple(dict.fromkeys(f.labelled() for f in ordered))
    texts = tuple(c.text for c in judge.commands)
    return BashAnalysis(
        verdict=verdict,
        reasons=reasons,
        commands=tuple(judge.commands),
        paths_read=tuple(judge.reads),
        paths_written=tuple(judge.writes),
        needs_network=judge.needs_network,
        read_only=verdict != "deny" and not judge.side_effects and not judge.writes,
        risk=risk_of(verdict, findings),
        explanation=explain(verdict, tuple(ordered), texts, judge.needs_network),
        bypass_immune=verdict == "ask" and any(f.immune for f in findings if f.verdict == "ask"),
    )


_RISK_ORDER = {"low": 0, "medium": 1, "high": 2}
