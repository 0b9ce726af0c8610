"""TFLiteExport: on-device variants of the pushed model, published only within an accuracy bound."""
