"""The landing root, chosen by its scheme: a local folder or a `gs://` bucket."""

from __future__ import annotations

from kafka_landing.store.base import LandingStore


def open_store(root: str, gcp_credentials: str | None = None) -> LandingStore:
    """The store of a landing root: `gs://bucket[/prefix]` or a local folder.
    `gcp_credentials`: a service-account key (JSON or base64 of it) for gs://, from an env var;
    None means Application Default Credentials (or the emulator under STORAGE_EMULATOR_HOST)."""
    root = str(root)
    if root.startswith("gs://"):
        from kafka_landing.store.gcs import GcsStore

        return GcsStore(root, credentials=gcp_credentials)
    if "://" in root:
        raise ValueError(f"landing root {root!r}: only local folders and gs://bucket[/prefix] roots are supported")
    from kafka_landing.store.local import LocalStore

    return LocalStore(root)


__all__ = ["LandingStore", "open_store"]
