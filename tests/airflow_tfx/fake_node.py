"""A stand-in for `retrain node run`: prints log lines and a RESULT line, exits as told.

    fake_node.py MODE [ignored retrain arguments...]
MODE: complete | cached | skipped | failed | gate | hang (sleeps, with a child process)
"""

import dataclasses
import os
import subprocess
import sys
import time

from core.results import NodeResult, result_line

mode = sys.argv[1]
print("fake node: starting", flush=True)
print("fake node: args " + " ".join(sys.argv[2:]), flush=True)
result = {"node_id": "Fake", "status": mode if mode != "gate" else "failed", "execution_id": 7, "seconds": 0.1}
code = 0
if mode in ("complete", "cached"):
    result["outputs"] = {"model": [{"id": 3, "uri": "/pipeline_root/Fake/model/7"}]}
elif mode == "failed":
    result["error"] = "ValueError: the executor broke"
    code = 1
elif mode == "gate":
    result.update(status="failed", error="DataGateError: span 201701 stopped: payment_type", gate_stopped=True)
    code = 3
elif mode == "hang":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    with open(os.environ["FAKE_PID_FILE"], "w") as f:
        f.write(f"{os.getpid()} {child.pid}")
    time.sleep(120)
print(result_line(dataclasses.replace(NodeResult("Fake", "complete"), **result)), flush=True)
sys.exit(code)
