"""Chicago taxi reference pipeline: predict whether a trip's tip exceeds 20% of the fare."""
