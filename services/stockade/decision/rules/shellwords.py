"""Shell word handling for command matching (DEC-1/2): quote removal, word splitting,
command names looked through assignments and wrappers, and the crude operator split used
when no executor analysis is available.

The wrapper table comes from the contract package (``stockade.contract.shell``), shared
with the executor's bash analysis.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping

from stockade.contract.shell import (
    PRIVILEGE_WRAPPERS,
    SYSTEM_BIN_DIRS,
    WRAPPERS,
    WrapperSpec,
    canonical_option,
    split_option,
)

# The wrapper table is shared with the executor's bash analysis (stockade.contract.shell), so
# the two sides read `time -f %e rm x` alike. DENY/ASK look through every wrapper, privilege
# changers included (a DENY on `rm` catches `sudo rm`); ALLOW looks only through wrappers that
# pass the command its arguments unchanged (`transparent`: time, nice, timeout, nohup ...),
# never xargs, env or sudo, which change what the command gets (DEC-1 rev 2).
_DENY_WRAPPERS: Mapping[str, WrapperSpec] = {**WRAPPERS, **PRIVILEGE_WRAPPERS}
_ALLOW_WRAPPERS: Mapping[str, WrapperSpec] = {n: w for n, w in WRAPPERS.items() if w.transparent}
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


_QUOTING = re.compile(r"[\\'\"]")
"""Characters the shell removes from words (searched with one C call, not a Python loop)."""


def _plain_tokens(text: str) -> list[str] | None:
    """The words of ``text`` when its name needs no looking through, else None.

    A plain name (no path, no assignment, no wrapper) is the common case; both forms of
    ``normalize_command`` then give the same words, so the caller may compute them once.
    """
    quoted = _QUOTING.search(text) is not None
    tokens = _split_words(text) if quoted else text.split()
    if tokens and quoted and _QUOTING.search(tokens[0]) is not None:
        # The shell removes quotes and backslashes from a command name: 'r'm and \rm are rm.
        tokens[0] = _unquote(tokens[0])
    if tokens:
        first = tokens[0]
        if "/" in first or "=" in first or first in _DENY_WRAPPERS:
            return None
    return tokens


def normalize_command(text: str, *, look_through_privilege: bool = True) -> str:
    """Return ``text`` with its command name normalised, for matching (DEC-1).

    The DENY/ASK form (the default) removes leading ``VAR=value`` assignments and every
    wrapper with its options (``env``, ``nice -n 5``, ``sudo -u root``, ``xargs`` ...) and
    cuts the name's path: ``/tmp/git status``, ``env git status`` and ``GIT_DIR=x git
    status`` all become ``git status``. The ALLOW form (``look_through_privilege=False``)
    removes only wrappers that pass the command its arguments unchanged (``time -f %e``,
    ``nice``, ``timeout 5``, ``nohup``) and cuts only a system directory (``/usr/bin/git``);
    assignments, ``env``, ``xargs``, ``sudo`` and programs run from other paths stay, so an
    ALLOW rule never matches more than it names. Whitespace runs collapse to one space.
    """
    plain = _plain_tokens(text)
    if plain is not None:
        return " ".join(plain)  # a plain name: nothing to look through (the common case)
    return _look_through(text, look_through_privilege)


def normalize_both(text: str) -> tuple[str, str]:
    """``normalize_command`` in its DENY/ASK form and its ALLOW form, sharing the split."""
    plain = _plain_tokens(text)
    if plain is not None:
        joined = " ".join(plain)
        return joined, joined
    return _look_through(text, True), _look_through(text, False)


def _look_through(text: str, deny_form: bool) -> str:
    """The slow path of ``normalize_command``: strip assignments and wrappers, cut the path."""
    tokens = _split_words(text) if _QUOTING.search(text) is not None else text.split()
    wrappers = _DENY_WRAPPERS if deny_form else _ALLOW_WRAPPERS
    # Each round removes at least one word, so this ends; the bound is for clarity.
    for _ in range(len(tokens) + 1):
        if deny_form:
            while tokens and _ASSIGNMENT.match(tokens[0]):
                tokens.pop(0)
        if not tokens:
            break
        tokens[0] = _unquote(tokens[0])
        name = _command_name(tokens[0], deny_form)
        spec = wrappers.get(name)
        if spec is None or len(tokens) == 1:
            break
        inner = _wrapped(spec, tokens[1:], deny_form)
        if inner is None:
            break  # ALLOW form: the wrapper changes what the command gets; keep it
        tokens = inner
    if tokens:
        tokens[0] = _command_name(tokens[0], deny_form)
    return " ".join(tokens)


def _command_name(word: str, deny_form: bool) -> str:
    """The name a command word runs: its base name (DENY/ASK: any path, since a DENY on
    ``rm`` must catch ``/tmp/rm``; ALLOW: only a system directory, since ``/tmp/git`` is not
    the ``git`` an ALLOW rule names)."""
    if "/" not in word:
        return word
    directory, _, base = word.rstrip("/").rpartition("/")
    if not base:
        return word
    if deny_form or posixpath.normpath(directory or "/") in SYSTEM_BIN_DIRS:
        return base
    return word


def _wrapped(spec: WrapperSpec, words: list[str], deny_form: bool) -> list[str] | None:
    """The wrapped command's words after a wrapper's options and positionals (GNU getopt
    conventions, like the executor's analysis), or None when the ALLOW form must not look
    through: the wrapper sets variables, runs a string (``env -S``) or runs no command.

    The DENY/ASK form looks through everything it can: a string-running option's value is
    split into the command (``env -S 'rm -rf x'``, ``su -c 'rm x'``).
    """
    takes_value = spec.value_options | spec.chdir_options | spec.read_options
    known = (spec.deny_options, spec.no_command_options, takes_value, spec.flag_options)
    positionals = spec.positionals
    i = 0
    while i < len(words):
        word = _unquote(words[i])
        if word == "--":
            i += 1
            break
        if spec.assignments and _ASSIGNMENT.match(word):
            if not deny_form:
                return None
            i += 1
            continue
        if word.startswith("-") and word != "-":
            step, command, unknown = _wrapper_option(spec, word, words, i, takes_value, known)
            if unknown and not deny_form:
                # An option the table does not know may take the next word (`env -a NAME
                # CMD`): the ALLOW form cannot tell which word is the command.
                return None
            if command is not None:
                return command if deny_form else None
            if step == 0:  # an option after which the words are not a command
                if not deny_form:
                    return None
                step = 1  # DENY/ASK over-match: still judge the words as a command
            i += step
            continue
        if positionals > 0:
            positionals -= 1
            i += 1
            continue
        break
    return words[i:]


def _wrapper_option(
    spec: WrapperSpec,
    word: str,
    words: list[str],
    i: int,
    takes_value: frozenset[str],
    known: tuple[frozenset[str], ...],
) -> tuple[int, list[str] | None, bool]:
    """Read the option ``word`` at ``words[i]``: (words it takes, the command it runs as a
    string or None, whether the table does not know one of its options). A step of 0 means
    an option after which no command follows. Short options may be bundled (``-Eu root``):
    the first that takes a value ends the bundle."""
    if word.startswith("--"):
        option, attached = split_option(word, takes_value | spec.deny_options)
        options = [canonical_option(option, known)]
    else:
        options, attached = [], None
        for k, ch in enumerate(word[1:], start=1):
            options.append("-" + ch)
            if options[-1] in takes_value or options[-1] in spec.deny_options:
                attached = word[k + 1 :] or None
                break
    last = options[-1]
    unknown = not all(spec.knows(o) for o in options)
    if any(o in spec.no_command_options for o in options):
        return 0, None, unknown
    if last in spec.deny_options:
        value = attached if attached is not None else (words[i + 1] if i + 1 < len(words) else "")
        rest = words[i + (1 if attached is not None else 2) :]
        return 0, _split_words(_unquote(value)) + rest, unknown
    if last in takes_value and attached is None:
        return 2, None, unknown
    return 1, None, unknown


# git's own options before its subcommand (git.c handle_options): those taking the next
# word as their value, and the prefixes of those that take it only attached.
_GIT_GLOBAL_VALUES = frozenset(
    {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--config-env",
     "--attr-source"}
)  # fmt: skip


def subcommand_form(deny_form: str) -> str | None:
    """The DENY/ASK form of a ``git`` command with git's global options dropped (``git -C
    . push origin``, ``git --git-dir=.git -c a=b --no-pager push`` are ``git push origin``,
    ``git push``), or None when there are none: a DENY on ``git push *`` must catch the
    push whatever git is told first, as it catches ``env git push``. Matched beside the
    form as written, so a rule naming the options still matches."""
    if not deny_form.startswith("git -"):
        return None
    tokens = (
        _split_words(deny_form) if _QUOTING.search(deny_form) is not None else deny_form.split()
    )
    i = 1
    while i < len(tokens):
        word = _unquote(tokens[i])
        if not word.startswith("-") or word == "-":
            break
        if word == "--":
            i += 1
            break
        i += 2 if word in _GIT_GLOBAL_VALUES else 1
    if i == 1:
        return None
    return " ".join(["git", *tokens[i:]])


# Spellings of one option, per command (the first words): a DENY on `rm -rf *` means
# recursive and forced, however written.
_OPTION_ALIASES: Mapping[tuple[str, ...], Mapping[str, str]] = {
    ("rm",): {"-R": "-r", "--recursive": "-r", "--force": "-f", "--dir": "-d"},
    ("cp",): {"-R": "-r", "--recursive": "-r", "--force": "-f"},
    ("mv",): {"--force": "-f"},
    ("chmod",): {"--recursive": "-R"},
    ("chown",): {"--recursive": "-R"},
    ("git", "push"): {"--force": "-f"},
    ("git", "clean"): {"--force": "-f"},
}
_RULE_WORD = r"[^\s*?\[\]\\-][^\s*?\[\]\\]*"
_OPTION_SET_RULE = re.compile(
    rf"(?P<lead>{_RULE_WORD}(?: {_RULE_WORD})?)"
    r"(?P<opts>(?: --?[A-Za-z0-9][A-Za-z0-9-]*)+) \*\Z"
)


# The command names of every option-set rule compiled in this process (only grows: a
# name no rule uses any more costs a few spare forms, never a missed match). Calls of other
# commands skip the canonical forms: most decisions pay nothing for them.
_OPTION_SET_NAMES: set[str] = set()


def _canonical_options(lead: list[str], options: list[str]) -> list[str]:
    """Options as one sorted set: short bundles split (``-rf`` is ``-r -f``), spellings of
    one option made one (``--recursive`` is ``-r`` for rm), repeats dropped."""
    aliases = _OPTION_ALIASES.get(tuple(lead), {})
    out: set[str] = set()
    for option in options:
        if option.startswith("--"):
            name = option.split("=", 1)[0]
            out.add(aliases.get(name, name))
        else:
            for letter in option[1:]:
                short = "-" + letter
                out.add(aliases.get(short, short))
    return sorted(out)


def option_set_pattern(content: str) -> str | None:
    """A DENY/ASK command pattern ``NAME [WORD] -OPTS… *`` as a glob over the canonical
    forms of :func:`option_set_forms`: the command with at least those options, in any
    order, bundling or spelling (``rm -rf *`` catches ``rm -fr x``, ``rm -r -f x``, ``rm
    -Rfv x``, ``rm --recursive --force x``). None for any other pattern."""
    match = _OPTION_SET_RULE.match(content)
    if match is None:
        return None
    lead = match.group("lead").split(" ")
    _OPTION_SET_NAMES.add(lead[0])
    options = _canonical_options(lead, match.group("opts").split())
    return " ".join(lead) + " " + " ".join("*" + o for o in options) + " *"


def option_set_forms(deny_form: str) -> list[str]:
    """A DENY/ASK form's canonical spellings for :func:`option_set_pattern`: the first one
    or two words, then every option of the command as a sorted set, then its other words in
    order (and each with a trailing space, for a command given no operand)."""
    if "-" not in deny_form or deny_form.partition(" ")[0] not in _OPTION_SET_NAMES:
        return []  # no DENY/ASK option-set rule names this command (the common case)
    words = _split_words(deny_form) if _QUOTING.search(deny_form) is not None else deny_form.split()
    out: list[str] = []
    for k in (1, 2):
        if len(words) <= k or any(w.startswith("-") for w in words[:k]):
            break
        options: list[str] = []
        others: list[str] = []
        ended = False
        for word in words[k:]:
            if not ended and word == "--":
                ended = True
            elif not ended and word.startswith("-") and word != "-":
                options.append(_unquote(word))
            else:
                others.append(word)
        if not options:
            continue
        form = " ".join([*words[:k], *_canonical_options(words[:k], options), *others])
        out += [form, form + " "]
    return out


def _split_words(text: str) -> list[str]:
    """Split on whitespace outside quotes, keeping each word's quotes (``X='a b'`` is one)."""
    words: list[str] = []
    buf: list[str] = []
    quote = ""
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and quote != "'" and i + 1 < len(text):
            buf.append(text[i : i + 2])
            i += 2
            continue
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch.isspace():
            if buf:
                words.append("".join(buf))
                buf = []
            i += 1
            continue
        buf.append(ch)
        i += 1
    if buf:
        words.append("".join(buf))
    return words


def _unquote(word: str) -> str:
    """Shell quote removal for one word (quotes and backslashes, no expansion)."""
    if not any(q in word for q in "\\'\""):
        return word
    out: list[str] = []
    quote = ""
    i = 0
    while i < len(word):
        ch = word[i]
        if ch == "\\" and quote != "'" and i + 1 < len(word):
            out.append(word[i + 1])
            i += 2
            continue
        if ch in "'\"" and (not quote or quote == ch):
            quote = "" if quote else ch
        else:
            out.append(ch)
        i += 1
    return "".join(out)


_CRUDE_SPLIT = re.compile(r"\|\||&&|[;&|\n`()]|\$\(")


def crude_split(command: str) -> tuple[str, ...]:
    """Split a command on every operator character, without a parser.

    Used only when no executor analysis is available. It over-splits (inside quotes too),
    which is the safe direction: DENY/ASK see more pieces, ALLOW must cover every piece.
    """
    pieces = [p.strip() for p in _CRUDE_SPLIT.split(command)]
    return tuple(p for p in pieces if p)


def normalize_pattern_command(content: str, *, exact: bool) -> str:
    """Normalise a command pattern's name like calls are, so `/usr/bin/rm *` means `rm *`;
    a DENY/ASK ``NAME [WORD] -OPTS… *`` matches those options as a set
    (:func:`option_set_pattern`)."""
    first, _, rest = content.strip().partition(" ")
    if "*" in first or "\\" in first:
        return content
    name = normalize_command(first, look_through_privilege=not exact) or first
    normalized = " ".join(f"{name} {rest}".split()) if rest else name
    if not exact:
        prefix = normalized[:-2]
        if normalized.endswith(" *") and not _GLOB_IN_PREFIX.search(prefix):
            BARE_PREFIXES.add(prefix)  # `git push *` also matches a bare `git push`
        return option_set_pattern(normalized) or normalized
    return normalized


_GLOB_IN_PREFIX = re.compile(r"[*?\[\\]")
BARE_PREFIXES: set[str] = set()
"""The literal prefixes ``P`` of every DENY/ASK command pattern ``P *`` compiled in this
process: a call that is exactly ``P`` is matched as ``P `` too (only grows, like
``_OPTION_SET_NAMES``)."""
