"""The self-contained HTML report: the page and its sections for one run."""
