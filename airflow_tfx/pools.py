"""Airflow pools for the pipelines' resource classes: `python -m airflow_tfx.pools TEMPLATE...`
prints `pool slots` lines (the largest size any pipeline's `airflow.pools` asks for), which
`scripts/airflow.sh cluster-start` turns into `airflow pools set`."""

from __future__ import annotations

import sys

from airflow_tfx import compiled_dag as template_lib


def pools(template_paths: list[str]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for path in template_paths:
        wanted = (template_lib.read(path, check_fresh=False).get("deployment", {}).get("airflow") or {}).get("pools", {})
        for name, slots in wanted.items():
            sizes[name] = max(sizes.get(name, 0), int(slots))
    return sizes


if __name__ == "__main__":
    for name, slots in sorted(pools(sys.argv[1:]).items()):
        print(name, slots)
