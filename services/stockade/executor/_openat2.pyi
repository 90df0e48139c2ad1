"""Type stub of the C module _openat2.c (built by `make native`)."""

def symlink_free_errno(path: str, /) -> int:
    """0 when the absolute path exists with no symlink in any component, else the errno."""

def symlink_free_links(path: str, /) -> int:
    """symlink_free_errno, and EMLINK when the path exists with no symlink but is a regular
    file with more than one link."""

def entry_exists(path: str, /) -> bool:
    """Whether an entry of that name exists (a final symlink not followed)."""
