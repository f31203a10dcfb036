"""How pyiceberg reaches an Iceberg warehouse on `gs://`: its PyArrow FileIO (Arrow's own GCS
client, no new dependency), with the catalog properties `tables` passes.

In production the file system takes Google's Application Default Credentials, as the Spark
connector (`spark_setup.gcs_config`) and the store do. On the GCS emulator (STORAGE_EMULATOR_HOST)
it must be anonymous: pyiceberg's own (`gcs.service.host` alone) still asks for default
credentials, and on a machine with none Arrow waits on the metadata server for a token the
emulator never wants. Hence this subclass, named by the catalog's `py-io-impl`.
"""

from __future__ import annotations

import os
from datetime import timedelta
from urllib.parse import urlparse

from pyiceberg.io import GCS_SERVICE_HOST
from pyiceberg.io.pyarrow import PyArrowFileIO

GCS_ANONYMOUS = "kafka-landing.gcs.anonymous"  # "true": no credentials (the emulator)


def emulator_host(env=None) -> str | None:
    """STORAGE_EMULATOR_HOST as a URL (it may be given without its scheme), or None in production."""
    host = (os.environ if env is None else env).get("STORAGE_EMULATOR_HOST")
    if not host:
        return None
    return host.rstrip("/") if "://" in host else f"http://{host.rstrip('/')}"


def gcs_properties(emulator: str | None) -> dict[str, str]:
    """The catalog properties of a gs:// warehouse: this FileIO, and the emulator's endpoint if any."""
    props = {"py-io-impl": f"{__name__}.GcsFileIO"}
    if emulator:
        props |= {GCS_SERVICE_HOST: emulator, GCS_ANONYMOUS: "true"}
    return props


class GcsFileIO(PyArrowFileIO):
    """PyArrowFileIO whose gs:// file system is anonymous on the emulator (the module says why)."""

    def _initialize_gcs_fs(self):
        if self.properties.get(GCS_ANONYMOUS) != "true":
            return super()._initialize_gcs_fs()
        from pyarrow.fs import GcsFileSystem

        url = urlparse(self.properties[GCS_SERVICE_HOST])
        # A request the emulator does not answer fails in a minute, not Arrow's default 15.
        return GcsFileSystem(anonymous=True, scheme=url.scheme, endpoint_override=url.netloc,
                             retry_time_limit=timedelta(seconds=60))
