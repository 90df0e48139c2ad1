"""LLM providers behind one interface (AGT-9)."""
