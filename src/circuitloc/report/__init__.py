"""What runs inside a table or figure job: tables, analysis, the sweep's statistics, writers,
figures and plots, the cost table. polars, numpy, scipy and matplotlib; never torch."""
