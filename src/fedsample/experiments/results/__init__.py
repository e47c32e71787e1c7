"""The results of a comparison: its metrics table, summary and tables, report, plots, bias and tracking."""
