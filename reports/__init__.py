"""Rendering of what the analyzers return: console tables, Markdown, HTML. No metric maths."""
