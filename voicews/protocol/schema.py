"""The JSON Schemas of both directions, as committed under ``protocol/schema/``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .client import client_adapter
from .events import server_adapter


def json_schemas() -> dict[str, dict[str, Any]]:
    """JSON Schemas of both directions, as committed under ``protocol/schema/``."""
    return {
        "client_message.schema.json": client_adapter.json_schema(),
        "server_event.schema.json": server_adapter.json_schema(mode="serialization"),
    }


def write_schemas(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, schema in json_schemas().items():
        (directory / name).write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n")
