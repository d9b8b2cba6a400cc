"""The benchmark history: reading result files, the canonical record, metrics, import, export, compare."""
