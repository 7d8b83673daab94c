"""Local mode for HorizontalPodPrescalers: the same HPAConfigured check against the HPA manifests found
in the --manifests files. There is no status subresource locally, so each result is logged when it
changes (WARNING with the exact patch command when the HPA lacks the metric) and kept in `conditions`."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from adapter.store.hpp import KIND_HPA, KIND_HPP, HPPError, check_hpa, condition, parse_hpp

log = logging.getLogger("prescaler.hpp")

Key = tuple[str, str]


class LocalHPPChecker:
    def __init__(self) -> None:
        self.conditions: dict[Key, dict[str, Any]] = {}

    def update(self, docs: Iterable[Mapping[str, Any]]) -> None:
        docs = list(docs)
        hpas: dict[Key, Mapping[str, Any]] = {}
        for doc in docs:
            meta = doc.get("metadata")
            if doc.get("kind") == KIND_HPA and isinstance(meta, Mapping) and isinstance(meta.get("name"), str):
                hpas[(str(meta.get("namespace") or "default"), meta["name"])] = doc
        results: dict[Key, dict[str, Any]] = {}
        for doc in docs:
            if doc.get("kind") != KIND_HPP:
                continue
            meta = doc.get("metadata") if isinstance(doc.get("metadata"), Mapping) else {}
            assert isinstance(meta, Mapping)
            key = (str(meta.get("namespace") or "default"), str(meta.get("name") or "<unnamed>"))
            try:
                hpp = parse_hpp(doc)
            except HPPError as exc:
                results[key] = {
                    "type": "HPAConfigured",
                    "status": "False",
                    "reason": "InvalidSpec",
                    "message": str(exc),
                }
                continue
            results[key] = condition(check_hpa(hpp, hpas.get((hpp.namespace, hpp.hpa_name))))
        for key, cond in results.items():
            if self.conditions.get(key) != cond:
                level = logging.INFO if cond["status"] == "True" else logging.WARNING
                log.log(
                    level,
                    "%s %s/%s: HPAConfigured=%s (%s): %s",
                    KIND_HPP,
                    key[0],
                    key[1],
                    cond["status"],
                    cond["reason"],
                    cond["message"],
                )
        self.conditions = results
