"""The Tuner: TFX's Tuner on a schedule, reusing the last search between searches."""
