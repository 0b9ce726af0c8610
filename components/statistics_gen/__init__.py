"""StatisticsGen: TFX's component, with TFDV's in-memory engine for a span small enough to hold."""
