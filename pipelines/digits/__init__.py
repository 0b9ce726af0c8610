"""Digits image-classification reference pipeline."""
