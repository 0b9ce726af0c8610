"""An auth manager with DAG-level access, for tests: Airflow's simple auth manager (its users,
roles, logins and tokens), except that the users named in RETRAIN_TEST_DAG_DENY may not see
the DAGs listed for them ("auditor=taxi_retraining;other=a,b"), as FAB's or Keycloak's
DAG-level permissions would rule. Set with
AIRFLOW__CORE__AUTH_MANAGER=tests.airflow_tfx.scoped_auth.ScopedAuthManager."""

from __future__ import annotations

import os

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

DENY_ENV = "RETRAIN_TEST_DAG_DENY"


def denied() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for item in filter(None, os.environ.get(DENY_ENV, "").split(";")):
        user, _, dags = item.partition("=")
        out[user.strip()] = {d.strip() for d in dags.split(",") if d.strip()}
    return out


class ScopedAuthManager(SimpleAuthManager):
    def is_authorized_dag(self, *, method, user, access_entity=None, details=None) -> bool:
        if details is not None and details.id in denied().get(user.get_name(), set()):
            return False
        return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)

