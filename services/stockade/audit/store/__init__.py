"""The audit store: one interface (``base.AuditBackend``), two backends, one setting.

``STOCKADE_AUDIT_STORE_DSN`` picks the backend (``base.parse_store_dsn``): unset or
``sqlite:///path`` for the SQLite file (``sqlite.AuditStore``: one node, the embedded
default), ``postgresql://…`` for PostgreSQL (``postgres.PostgresAuditStore``: several
replicas, a hash chain each). One concern per module:

- ``base``: the interface every backend provides, and the choice of backend;
- ``reads``: what both backends read the same way (query pages, the tail, metrics);
- ``sqlite``: the SQLite store, with ``schema`` (its tables), ``writer`` (its single
  writer thread, which chains and inserts) and ``checkpoint`` (its WAL checkpoints);
- ``postgres``: the PostgreSQL store, its migrations and the check of every chain.

Nothing is imported here: import the module you need (the SQLite store's offline check,
``stockade.audit.verify``, reads this package's schema, so eager imports would cycle).
"""
