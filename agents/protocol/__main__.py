"""``python -m agents.protocol > docs/protocol.schema.json``"""

import json

from agents.protocol.schema import protocol_json_schema

print(json.dumps(protocol_json_schema(), indent=2, sort_keys=True))
