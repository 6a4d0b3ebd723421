"""The table jobs: Table 1 and Table 2, their paper and HTML forms, the analysis tables, the cost table
and MIB's export, and the writers that put each on disk."""
