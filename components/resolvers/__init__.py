"""Resolver strategies: which earlier artifacts a run's nodes read (baselines, windows, caches)."""
