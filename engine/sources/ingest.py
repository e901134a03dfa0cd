"""ingest: an ingest job finishing (seed 000). An `ingest_jobs` document watched until its status becomes
done or failed; the ending is the event, so the check is fixed (engine/spec.py)."""

from __future__ import annotations

from engine.content import Content
from engine.sources import document
from engine.sources.base import SourceIO, SourcePolicy, SourceSpec

FIELDS = frozenset({"type", "item_id"})
ITEM_TYPE = "ingest_jobs"
#: the statuses that end an ingest job
ENDINGS = ("done", "failed")
CONDITION = "has(doc.status) && (doc.status == 'done' || doc.status == 'failed')"


def parse(raw: dict, policy: SourcePolicy) -> SourceSpec:
    return SourceSpec(type="ingest", item_type=ITEM_TYPE,
                      item_id=document.check_item_id(raw.get("item_id"), "source.item_id"))


def read(spec: SourceSpec, io: SourceIO) -> bytes:
    return document.read(spec, io)


def normalize(spec: SourceSpec, body: bytes, max_text_bytes: int) -> Content:
    return document.normalize(spec, body, max_text_bytes)
