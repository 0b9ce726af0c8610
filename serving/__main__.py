"""`python -m serving`: see `serving/server/main.py`."""

import os
import sys

from serving.server.main import main

code = main()
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)  # TensorFlow's interpreter-exit finalizers print spurious tracebacks
