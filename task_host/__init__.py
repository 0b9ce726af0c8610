"""Where task processes are hosted: the warm TFX runtime's protocol (protocol.py), its TF-free
client (client.py) and server (warm_server.py), the pod wrapper (pod.py) and the helper that
starts a warm runtime and waits for it (spawn.py). Imports core only, so Airflow's side uses it."""
