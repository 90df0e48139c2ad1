"""The approval console: a web page where people answer approvals, manage "always allow"
grants, change sessions and read the audit trail (talks to decision and audit over gRPC)."""
