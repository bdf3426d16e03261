"""The records every mode writes, their definitions and their one reader (docs/record.md)."""
