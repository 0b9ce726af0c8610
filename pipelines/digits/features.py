"""Feature keys of the digits pipeline: encoded images and their class."""

# Encoded PNG (or JPEG) bytes, one image per tf.Example.
IMAGE_KEY = "image"
LABEL_KEY = "label"
NUM_CLASSES = 10
# Pixels of the stored images (scikit-learn's digits are 8x8 grayscale).
RAW_IMAGE_SIZE = 8
CHANNELS = 1


def transformed_name(key: str) -> str:
    """Name of a feature after Transform."""
    return key + "_xf"


IMAGE_XF = transformed_name(IMAGE_KEY)
LABEL_XF = transformed_name(LABEL_KEY)
