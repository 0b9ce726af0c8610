"""Diabetes pipeline: Predicts progression (regression) from 10 columns of monthly spans."""
