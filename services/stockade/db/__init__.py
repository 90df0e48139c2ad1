"""Database plumbing shared by the stateful services (STORE-1): which backend a DSN
selects, DSNs safe to log, and the PostgreSQL pieces (connections and pools with errors
mapped to UNAVAILABLE, versioned migrations under an advisory lock).

Neutral by design: it imports no service, so the decision, executor and audit services
can all use it without depending on each other (import-linter keeps it so)."""
