"""Charts as inline SVG (matplotlib): the figure machinery, one-run and comparison charts."""
