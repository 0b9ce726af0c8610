"""The data gate: stops a span before Transform when its data is not fit to train on."""
