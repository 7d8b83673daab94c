#!/usr/bin/env python3
"""Validate prescaler manifests offline: a thin wrapper around `prescaler validate` (adapter/validate.py).

    python deploy/crds/validate.py examples/*.yaml

Kept for scripts that call it. It checks the CRD schema, the CEL rules, the server's parser and the
expressions. Unlike its first version it never skips the CEL rules silently: without cel-python it
exits 2 with a message. Exit status 1 when any object is invalid.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))  # the repository, when not installed

from adapter.validate import (  # noqa: E402,F401 - re-exported for callers of the old module
    CrdValidator,
    load_validators,
    main,
    to_json_schema,
    validate_documents,
)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
