"""The plan's JSON document around its operators (docs/plan-schema.md): apart from the
rendering, so that a plan taken from the user cache prints without importing the parser
or networkx."""

from __future__ import annotations

import json

PLAN_SCHEMA_VERSION = 1


def plans_json(plans: list[dict[str, object]]) -> str:
    return json.dumps({"version": PLAN_SCHEMA_VERSION, "operators": plans}, indent=2) + "\n"
