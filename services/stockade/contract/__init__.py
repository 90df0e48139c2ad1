"""gRPC-free code both sides of a service boundary need: tool traits, the grant format,
the shell wrapper table. Services import this package, never each other's internals."""
