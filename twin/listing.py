"""Lists read through the Kubernetes Python client as the API server's JSON.

The twin's stand-ins (the GPU operator's operands, the autoscaler) read every node and pod each pass, every
half second or second. The client's default turns each object into its model classes (every timestamp parsed
by dateutil), which the stand-ins would only turn back into dicts; reading the response body as JSON gives the
same dicts, in the API server's own spelling, for a fraction of the CPU.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def listed(call: Callable[..., Any], **kwargs: Any) -> list[dict[str, Any]]:
    """The items of a list call (`core.list_node`, ...) as dicts; an error status raises the client's
    ApiException as the call itself would."""
    response = call(_preload_content=False, **kwargs)
    return list(json.loads(response.data)["items"])
