"""``python -m voicews.protocol DIR`` writes the JSON Schemas (default: ``protocol/schema``)."""

import sys
from pathlib import Path

from .schema import write_schemas

write_schemas(Path(sys.argv[1] if len(sys.argv) > 1 else "protocol/schema"))
