"""What a person reads: rich tables, figures, the one-page report."""
