"""gRPC-free code both sides of a service boundary need: tool traits, the grant format,
the shell wrapper table, the audit event bounds. Services import this package, never each
other's internals."""
