"""ServingSkew: the requests the served model answers vs the data it was trained on."""
