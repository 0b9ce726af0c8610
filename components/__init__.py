"""Reusable custom TFX components and trainer/serving building blocks."""
