"""`python -m serving`: see `serving/main.py`."""

import os
import sys

from serving.main import main

code = main()
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)  # TensorFlow's interpreter-exit finalizers print spurious tracebacks
