"""The `retrain` command line (the top layer): argument parsing and dispatch to the layers below."""
