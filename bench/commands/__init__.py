"""The bench commands, one module each, grouped by what they measure."""
