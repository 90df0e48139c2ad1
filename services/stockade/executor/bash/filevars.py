"""Environment variables that name a file a program writes (EXE-8e).

``GIT_TRACE=/elsewhere/x git status`` makes git append its trace to that file;
``HISTFILE``, ``LESSHISTFILE`` and friends make shells and REPLs save history there;
``SSLKEYLOGFILE`` writes TLS session keys. Setting one is a write of the file it names,
judged by the path sandbox like a redirection: outside the writable roots or on a
protected path it is refused, inside it is a write. (Whether a variable may be set at
all is the environment allow-list's question; this is the path's.)
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["FILE_VARIABLES", "written_file"]

FILE_VARIABLES: Final = frozenset(
    {
        # git's trace targets: a value that is not 0/1/2/true/false or an fd is a path.
        "GIT_TRACE",
        "GIT_TRACE2",
        "GIT_TRACE2_EVENT",
        "GIT_TRACE2_PERF",
        "GIT_TRACE_PACKET",
        "GIT_TRACE_PACKFILE",
        "GIT_TRACE_PERFORMANCE",
        "GIT_TRACE_SETUP",
        "GIT_TRACE_SHALLOW",
        "GIT_TRACE_CURL",
        "GIT_TRACE_REFS",
        "GIT_TRACE_FSMONITOR",
        # History files of shells, pagers and REPLs.
        "HISTFILE",
        "LESSHISTFILE",
        "PYTHON_HISTORY",
        "NODE_REPL_HISTORY",
        "PSQL_HISTORY",
        "MYSQL_HISTFILE",
        "SQLITE_HISTORY",
        "REDISCLI_HISTFILE",
        "IRBRC_HISTFILE",
        # Logs, keys, profiles and temp files written where the variable says.
        "SSLKEYLOGFILE",
        "LLVM_PROFILE_FILE",
        "GCOV_PREFIX",
        "MALLOC_TRACE",
        "PIP_LOG",
        "PIP_LOG_FILE",
        "CCACHE_LOGFILE",
        "TMPDIR",
        "TMP",
        "TEMP",
        "TEMPDIR",
    }
)
"""Variables whose value is a file (or directory) that programs write."""

# Any other variable with one of these endings names a written file by convention.
_FILE_SUFFIX: Final = re.compile(r"_(LOG_FILE|LOGFILE|LOG_PATH|HISTFILE|HISTORY_FILE|TRACE_FILE)\Z")
# git trace values that do not name a file: off, stderr, a file descriptor.
_NOT_A_FILE: Final = re.compile(r"(|0|1|2|[0-9]+|true|false|yes|no|on|off)\Z", re.IGNORECASE)


def written_file(name: str, value: str) -> str | None:
    """The file the variable ``name`` set to ``value`` makes programs write, or None."""
    upper = name.upper()
    if upper not in FILE_VARIABLES and not _FILE_SUFFIX.search(upper):
        return None
    if upper.startswith("GIT_TRACE"):
        if _NOT_A_FILE.match(value) or value.startswith("af_unix:"):
            return None
        return value
    return value or None
