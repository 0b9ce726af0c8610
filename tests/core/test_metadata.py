"""The metadata setting: URLs, the password's only sources, and clear errors from a real server."""

import pytest

from core import metadata


def test_sqlite_is_the_default_and_a_url_may_name_another_file():
    assert metadata.parse("", "/w/metadata/taxi.sqlite") == metadata.Store("sqlite", path="/w/metadata/taxi.sqlite")
    assert metadata.parse("sqlite", "/d").path == "/d"
    assert metadata.parse("sqlite:////abs/m.sqlite", "/d").path == "/abs/m.sqlite"
    assert metadata.parse("sqlite:////abs/m.sqlite", "/d").url == "sqlite:///abs/m.sqlite"


def test_mysql_url_with_host_or_socket_and_password_never_in_url_or_repr():
    s = metadata.parse("mysql://retrain:s3cret@127.0.0.1:13306/mlmd", "/d")
    assert (s.kind, s.host, s.port, s.database, s.user, s.password) == ("mysql", "127.0.0.1", 13306, "mlmd",
                                                                          "retrain", "s3cret")
    assert "s3cret" not in s.url and "s3cret" not in repr(s)
    assert s.url == "mysql://retrain@127.0.0.1:13306/mlmd"
    sock = metadata.parse("mysql://retrain@/mlmd?socket=/run/mysqld/mysqld.sock", "/d")
    assert (sock.host, sock.socket) == ("", "/run/mysqld/mysqld.sock")
    assert metadata.parse(sock.url, "/d") == sock  # the recorded URL reads back


def test_environment_wins_and_brings_the_password():
    env = {metadata.URL_ENV: "mysql://u@127.0.0.1/db", metadata.PASSWORD_ENV: "pw"}
    s = metadata.resolve("sqlite", "/d", env)
    assert (s.kind, s.password) == ("mysql", "pw")
    assert metadata.from_record(s.url, env).password == "pw"
    assert metadata.resolve(None, "/d", {}).is_sqlite


def test_an_ir_config_gets_its_password_from_the_environment_only():
    saved = metadata.connection_config(metadata.parse("mysql://u@127.0.0.1:3306/db", "/d"))
    assert saved.mysql.password == ""
    filled = metadata.with_password(saved, {metadata.PASSWORD_ENV: "pw"})
    assert filled.mysql.password == "pw" and saved.mysql.password == ""


@pytest.mark.parametrize("url, words", [
    ("mysql://u@localhost:3306/db", ["localhost", "127.0.0.1", "socket"]),
    ("mysql://u@127.0.0.1:3306/db?socket=/s", ["host or a socket"]),
    ("mysql://u@127.0.0.1:3306/", ["no database"]),
    ("mysql://127.0.0.1:3306/db", ["no user"]),
    ("postgres://u@127.0.0.1/db", ["unknown scheme"]),
    ("mysql://u@127.0.0.1:99999/db", ["Port out of range"]),
])
def test_bad_urls_are_bad_input_naming_the_problem(url, words):
    with pytest.raises(metadata.MetadataConfigError) as e:
        metadata.parse(url, "/d")
    assert all(w in str(e.value) for w in words), str(e.value)


def test_a_password_in_a_config_file_is_refused_and_redacted():
    with pytest.raises(metadata.MetadataConfigError) as e:
        metadata.check_config_value("mysql://u:hunter2@127.0.0.1/db")
    assert "hunter2" not in str(e.value) and metadata.PASSWORD_ENV in str(e.value)


def test_server_failures_say_which(mariadb, tmp_path):
    env = mariadb("probe_errors")
    good = metadata.resolve(None, "", env)
    assert metadata.open_store(good).get_artifact_types() == []  # schema created on first use
    with pytest.raises(metadata.MetadataUnavailable) as e:
        metadata.open_store(metadata.parse(good.url, "", "wrong-password"))
    assert "mysql_native_password" in str(e.value) and "refused" in str(e.value)
    down = metadata.parse("mysql://retrain@127.0.0.1:1/x", "", "pw")
    with pytest.raises(metadata.MetadataUnavailable) as e:
        metadata.open_store(down)
    assert "nothing answers at 127.0.0.1:1" in str(e.value)
    with pytest.raises(metadata.MetadataUnavailable) as e:
        metadata.open_store(metadata.parse("sqlite", str(tmp_path / "none.sqlite")), readonly=True)
    assert "no ML Metadata" in str(e.value)
