"""Where ML Metadata lives: a SQLite file (the default) or a MySQL/MariaDB server.

One setting, a URL, from the pipeline config's `metadata:` or the environment
(`RETRAIN_METADATA_URL`, which wins):

    sqlite                                   <workdir>/metadata/<pipeline>.sqlite
    sqlite:////abs/path/mlmd.sqlite          another file
    mysql://user@127.0.0.1:3306/database     a server over TCP
    mysql://user@/database?socket=/run/mysqld/mysqld.sock

The password never sits in a config file, a compiled template, an IR or a report: it comes
from `RETRAIN_METADATA_PASSWORD` (or the password part of `RETRAIN_METADATA_URL`, which
Airflow fills from the `retrain_metadata` connection). `Store.url` is the redacted form
that everything records and prints.

ml-metadata 1.16's bundled MySQL client has two traps this module turns into clear errors:
"localhost" makes it look for a socket at a compiled-in path (use 127.0.0.1 or `socket=`),
and it speaks only `mysql_native_password`; every refusal surfaces as an empty
"mysql_real_connect failed" message.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import urllib.parse
from collections.abc import Mapping

from core.errors import BadInput

URL_ENV = "RETRAIN_METADATA_URL"
PASSWORD_ENV = "RETRAIN_METADATA_PASSWORD"
SQLITE = "sqlite"


class MetadataConfigError(BadInput):
    """The metadata URL is malformed or points at something unusable; names the problem."""


class MetadataUnavailable(BadInput):
    """The metadata store could not be opened (server down, refused login...)."""


@dataclasses.dataclass(frozen=True)
class Store:
    """A resolved metadata store. `password` is never part of repr, url or any file."""

    kind: str  # "sqlite" | "mysql"
    path: str = ""  # sqlite
    host: str = ""
    port: int = 3306
    database: str = ""
    user: str = ""
    socket: str = ""
    password: str = dataclasses.field(default="", repr=False, compare=False)

    @property
    def is_sqlite(self) -> bool:
        return self.kind == SQLITE

    @property
    def url(self) -> str:
        """The redacted URL: safe to print, log and record."""
        if self.is_sqlite:
            return f"sqlite:///{os.path.abspath(self.path).lstrip('/')}"
        where = f"{self.host}:{self.port}" if self.host else ""
        query = f"?socket={self.socket}" if self.socket else ""
        return f"mysql://{self.user}@{where}/{self.database}{query}"

    def exists(self) -> bool:
        """Whether there can be anything to read (a server is assumed to hold a store)."""
        return not self.is_sqlite or os.path.exists(self.path)


def parse(url: str, sqlite_default: str, password: str = "") -> Store:
    """Parses a metadata URL (see the module doc). `sqlite_default` is the bare `sqlite` file.

    Raises:
      MetadataConfigError: naming what is wrong with the URL.
    """
    url = (url or SQLITE).strip()
    if url == SQLITE:
        return Store(SQLITE, path=sqlite_default)
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.split("+", 1)[0]  # mysql+pymysql:// etc. read as mysql://
    if scheme == SQLITE:
        path = urllib.parse.unquote(parts.path)
        if not path or path == "/":
            raise MetadataConfigError(f"metadata URL {url!r}: no file path (sqlite:////abs/path.sqlite)")
        return Store(SQLITE, path=path[1:] if path.startswith("//") else path)
    if scheme not in ("mysql", "mariadb"):
        raise MetadataConfigError(
            f"metadata URL {_redact(url)!r}: unknown scheme {parts.scheme!r}; use sqlite or mysql://user@host:port/database")
    query = urllib.parse.parse_qs(parts.query)
    sock = (query.get("socket") or query.get("unix_socket") or [""])[0]
    database = parts.path.lstrip("/")
    if not database:
        raise MetadataConfigError(f"metadata URL {_redact(url)!r}: no database name (mysql://user@host:port/database)")
    if not parts.username:
        raise MetadataConfigError(f"metadata URL {_redact(url)!r}: no user name (mysql://user@host:port/database)")
    host = parts.hostname or ""
    if host and sock:
        # The bundled client aborts the whole process when given both.
        raise MetadataConfigError(f"metadata URL {_redact(url)!r}: give a host or a socket, not both")
    if host == "localhost":
        raise MetadataConfigError(
            f"metadata URL {_redact(url)!r}: 'localhost' makes ml-metadata's MySQL client use a socket path "
            "compiled into it, which is not your server's; use 127.0.0.1 (TCP) or ?socket=/path/to/mysqld.sock")
    if not host and not sock:
        raise MetadataConfigError(f"metadata URL {_redact(url)!r}: no host (mysql://user@127.0.0.1:3306/database)")
    try:
        port = parts.port or 3306
    except ValueError as e:
        raise MetadataConfigError(f"metadata URL {_redact(url)!r}: {e}") from e
    return Store("mysql", host=host, port=port, database=database, user=urllib.parse.unquote(parts.username),
                 socket=sock, password=password or urllib.parse.unquote(parts.password or ""))


def resolve(configured: str | None, sqlite_default: str, env: Mapping[str, str] = os.environ) -> Store:
    """The store a process uses: `RETRAIN_METADATA_URL` if set, else the config's setting."""
    return parse(env.get(URL_ENV) or configured or SQLITE, sqlite_default, env.get(PASSWORD_ENV, ""))


def check_config_value(value: str) -> None:
    """A config file's `metadata:` must not carry a password (it would end up in git)."""
    parts = urllib.parse.urlsplit(value or "")
    if parts.password:
        raise MetadataConfigError(
            f"metadata: {_redact(value)!r} has a password; config files are not secret: set {PASSWORD_ENV} "
            "(or an Airflow connection retrain_metadata) instead")


def _redact(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if not parts.password:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def connection_config(store: Store, readonly: bool = False):
    """The ml-metadata `ConnectionConfig` (needs the TFX runtime's `ml_metadata`)."""
    from ml_metadata.proto import metadata_store_pb2

    config = metadata_store_pb2.ConnectionConfig()
    if store.is_sqlite:
        config.sqlite.filename_uri = store.path
        config.sqlite.connection_mode = (
            metadata_store_pb2.SqliteMetadataSourceConfig.READONLY if readonly
            else metadata_store_pb2.SqliteMetadataSourceConfig.READWRITE_OPENCREATE)
        return config
    if store.socket:
        config.mysql.socket = store.socket
    else:
        config.mysql.host = store.host
        config.mysql.port = store.port
    config.mysql.database = store.database
    config.mysql.user = store.user
    config.mysql.password = store.password
    return config


def from_record(url: str, env: Mapping[str, str] = os.environ) -> Store:
    """The store a run folder recorded (its redacted URL), with the password from the environment."""
    env_url_password = urllib.parse.unquote(urllib.parse.urlsplit(env.get(URL_ENV, "")).password or "")
    return parse(url, "", env.get(PASSWORD_ENV) or env_url_password)


def with_password(config, env: Mapping[str, str] = os.environ):
    """A MySQL connection config from an IR (saved without its password) with the password
    from the environment; SQLite configs are returned as they are."""
    if config.WhichOneof("config") == "mysql" and not config.mysql.password:
        filled = type(config)()
        filled.CopyFrom(config)
        url_password = urllib.parse.urlsplit(env.get(URL_ENV, "")).password or ""
        filled.mysql.password = env.get(PASSWORD_ENV) or urllib.parse.unquote(url_password)
        return filled
    return config


def open_store(store: Store, readonly: bool = False):
    """An ml-metadata `MetadataStore`; creates the schema on first use (read-write).

    Raises:
      MetadataUnavailable: the server is not reachable or refused the login, saying which.
    """
    from ml_metadata import metadata_store

    if store.is_sqlite and readonly and not os.path.exists(store.path):
        raise MetadataUnavailable(f"no ML Metadata at {store.path} (no run yet?)")
    if store.is_sqlite and not readonly:
        os.makedirs(os.path.dirname(os.path.abspath(store.path)), exist_ok=True)
    try:
        return metadata_store.MetadataStore(connection_config(store, readonly))
    except RuntimeError as e:
        if store.is_sqlite:
            raise MetadataUnavailable(f"cannot open ML Metadata at {store.path}: {e}") from e
        raise MetadataUnavailable(explain_mysql_failure(store, str(e))) from e


def explain_mysql_failure(store: Store, error: str) -> str:
    """What a failed MySQL connection most likely means (the client's own message is empty)."""
    if store.socket:
        if not os.path.exists(store.socket):
            return f"ML Metadata at {store.url}: no socket at {store.socket} (is the server running?)"
    else:
        try:
            with socket.create_connection((store.host, store.port), timeout=5):
                pass
        except OSError as e:
            return (f"ML Metadata at {store.url}: nothing answers at {store.host}:{store.port} ({e.strerror or e}); "
                    "is the MySQL/MariaDB server running? (scripts/services.sh start mariadb)")
    what = error.strip() or "no reason given"
    return (f"ML Metadata at {store.url}: the server refused the connection ({what}). Check, in this order: "
            f"the password ({PASSWORD_ENV}{' is not set' if not store.password else ''}); that user "
            f"{store.user!r} uses mysql_native_password, the only method ml-metadata 1.16's client speaks "
            "(MySQL 8: CREATE USER ... IDENTIFIED WITH mysql_native_password BY '...'; MariaDB: IDENTIFIED VIA "
            "mysql_native_password USING PASSWORD('...'); ed25519/caching_sha2 users fail like this); that it may "
            f"create and use database {store.database!r}")
