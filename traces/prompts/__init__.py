"""Deterministic prompt materialisation: text, images and the tokens an image becomes."""
