"""Feature keys of the taxi pipeline: the single place that names raw and transformed columns."""

# Integer-coded categoricals and the number of values each can take (a bound, used as the
# one-hot width; values at or above it are clipped into the last slot).
CATEGORICAL_FEATURE_MAX_VALUES = {
    "trip_start_hour": 24,
    "trip_start_day": 8,
    "trip_start_month": 13,
}
DENSE_FLOAT_FEATURE_KEYS = ["trip_miles", "fare", "trip_seconds"]
BUCKET_FEATURE_KEYS = [
    "pickup_latitude",
    "pickup_longitude",
    "dropoff_latitude",
    "dropoff_longitude",
]
FEATURE_BUCKET_COUNT = 10
VOCAB_FEATURE_KEYS = ["payment_type", "company"]
VOCAB_SIZE = 1000
OOV_SIZE = 10

LABEL_KEY = "tips"
FARE_KEY = "fare"
# A "big tipper" tips more than this fraction of the fare: the binary label.
BIG_TIP_FRACTION = 0.2

# Features the evaluation is sliced by (TFMA slicing specs).
SLICE_FEATURE_KEYS = ["trip_start_hour"]


def transformed_name(key: str) -> str:
    """Name of a feature after Transform."""
    return key + "_xf"


def transformed_names(keys: list[str]) -> list[str]:
    return [transformed_name(k) for k in keys]


LABEL_XF = transformed_name(LABEL_KEY)

ALL_FEATURE_KEYS = (
    list(CATEGORICAL_FEATURE_MAX_VALUES)
    + DENSE_FLOAT_FEATURE_KEYS
    + BUCKET_FEATURE_KEYS
    + VOCAB_FEATURE_KEYS
)
