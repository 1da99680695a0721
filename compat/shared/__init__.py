"""Pure pieces both sides use (records, the registry, profiles, the traceback parser): they import neither side,
nor vLLM and the like."""
