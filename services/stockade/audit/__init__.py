"""The audit service (L3): a durable, tamper-evident log of every tool call."""
