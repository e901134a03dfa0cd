"""monitor_create for document and ingest sources (seed 001's dynadata_doc, seed 000's ingest end), and the
fixed interval of time watches: what is accepted, what is refused with one sentence, and the notes."""

import pytest

from engine.errors import SpecError
from engine.sources import document, ingest
from engine.sources.base import SourceSpec
from engine.spec import TIME_RETRY_SECONDS, Limits, parse_create

LIMITS = Limits()
DONE = {"type": "cel", "expr": "has(doc.status) && doc.status == 'done'"}


def watch(item_type="ct:render", item_id="r-1", check=DONE, **arguments):
    source = {"type": "document", "item_type": item_type, "item_id": item_id}
    return {"description": "the render finishes", "source": source,
            **({"check": check} if check is not None else {}), **arguments}


def create(arguments, limits=LIMITS):
    return parse_create(arguments, limits)


def refusal(arguments) -> str:
    with pytest.raises(SpecError) as error:
        create(arguments)
    message = str(error.value)
    assert "\n" not in message and message.endswith((".", ")")), message
    return message


# --- item types --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("item_type", ["transcription_jobs", "transcode_jobs", "ingest_jobs", "ct:render",
                                       "ct:a", "ct:9lives", "ct:my_type.v2-b", "ct:" + "a" * 64])
def test_document_item_type_allowed(item_type):
    spec, notes = create(watch(item_type=item_type))
    assert (spec.source.type, spec.source.item_type, spec.source.item_id) == ("document", item_type, "r-1")
    assert notes == []


@pytest.mark.parametrize("item_type", ["users", "transcription_job", "Transcode_jobs", "ct:", "ct:Render",
                                       "ct:_x", "ct:-x", "ct:.x", "ct:a b", "ct:a/b", "ct:é", "CT:render",
                                       "ct:" + "a" * 65, "", 3, None, ["ct:render"]])
def test_document_item_type_refused_with_the_allowed_ones(item_type):
    message = refusal(watch(item_type=item_type))
    assert message.startswith("source.item_type must be one of transcription_jobs, transcode_jobs, ingest_jobs, "
                              "or ct:<name> for a custom type")
    assert "up to 64 characters" in message and repr(item_type) in message


def test_check_item_type_names_the_field_it_was_given():
    with pytest.raises(SpecError, match=r"^itemType must be one of"):
        document.check_item_type("nope", "itemType")
    assert document.check_item_type("ct:render") == "ct:render"


# --- item ids ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("item_id", ["r-1", "a/b/c", "65f1c0de9a", "é", "x" * 200, "job 7"])
def test_document_item_id_allowed(item_id):
    assert create(watch(item_id=item_id))[0].source.item_id == item_id


@pytest.mark.parametrize("item_id", ["", "   ", None, 7, {"id": 1}])
def test_document_item_id_required(item_id):
    assert refusal(watch(item_id=item_id)) == "source.item_id is required: the document's id, as the platform stored it."


@pytest.mark.parametrize("item_id", [" r-1", "r-1 ", "a\nb", "a\tb", "a\x00b", "x" * 201])
def test_document_item_id_refused_when_not_plain_printable_text(item_id):
    assert refusal(watch(item_id=item_id)).startswith(
        "source.item_id must be printable text without surrounding spaces, at most 200 characters")


def test_document_source_refuses_a_field_it_does_not_take():
    message = refusal({**watch(), "source": {"type": "document", "item_type": "ct:r", "item_id": "1",
                                             "url": "https://example.com"}})
    assert message == "source has an unknown field 'url'; a document source takes item_id, item_type, type."


def test_document_source_reads_nothing():
    from engine.http import FetchError

    with pytest.raises(FetchError, match="nothing is fetched"):
        document.read(SourceSpec(type="document", item_type="ct:r", item_id="1"), None)


def test_document_normalize_digest_covers_the_whole_document_even_when_the_text_is_cut():
    spec = SourceSpec(type="document", item_type="ct:r", item_id="1")
    first = document.normalize(spec, b'{"log":"' + b"x" * 100 + b'","status":"a"}', 20)
    second = document.normalize(spec, b'{"log":"' + b"x" * 100 + b'","status":"b"}', 20)
    assert first.text == second.text and first.data != second.data
    assert first.digest != second.digest


# --- the check of a document watch -----------------------------------------------------------------------------

@pytest.mark.parametrize("check", [None, {"type": "change"}, {"type": "regex", "pattern": "done"},
                                   {"type": "threshold", "op": "gt", "value": 1, "value_path": "n"}])
def test_document_watch_without_a_cel_check_is_refused(check):
    assert refusal(watch(check=check)) == ("A document watch needs check {\"type\": \"cel\", \"expr\": …} over doc, "
                                           "e.g. has(doc.status) && doc.status == 'done'.")


def test_document_watch_with_a_bad_cel_check_is_refused_by_the_check():
    assert refusal(watch(check={"type": "cel", "expr": "doc.status =="})).startswith("check.expr is not valid CEL")


@pytest.mark.parametrize("extra", [{"condition": "the render is done"}, {"judge_model": "gpt-x"},
                                   {"condition": "done", "judge_model": "gpt-x"}])
def test_document_watch_with_condition_or_judge_model_is_refused(extra):
    assert refusal(watch(**extra)) == ("A document watch decides with its CEL check alone; take condition and "
                                       "judge_model out.")


def test_document_watch_keeps_its_check_note_and_max_wakes():
    spec, notes = create(watch(note="Post the render link", max_wakes=2))
    assert (spec.check.type, spec.check.expr) == ("cel", DONE["expr"])
    assert spec.note == "Post the render link" and spec.max_wakes == 2 and notes == []


# --- interval: a document is checked on each write, and swept -----------------------------------------------------

def test_document_watch_interval_is_the_sweep():
    assert create(watch())[0].interval_seconds == LIMITS.document_sweep == 300
    assert create(watch(), Limits(document_sweep=60))[0].interval_seconds == 60


def test_document_watch_interval_given_is_ignored_with_a_note():
    spec, notes = create(watch(interval="1h"))
    assert spec.interval_seconds == 300
    assert notes == ["A document is checked each time it is written (and read again every 5m), so interval was "
                     "ignored."]


def test_document_watch_short_interval_gets_only_the_ignored_note():
    spec, notes = create(watch(interval="1m"))
    assert spec.interval_seconds == 300
    assert notes == ["A document is checked each time it is written (and read again every 5m), so interval was "
                     "ignored."]


# --- ingest: the job's ending is the event ----------------------------------------------------------------------

def ingest_watch(**arguments):
    return {"description": "the ingest ends", "source": {"type": "ingest", "item_id": "job-9"}, **arguments}


def test_ingest_watch_is_fixed_to_the_ending_condition():
    spec, notes = create(ingest_watch())
    assert (spec.source.type, spec.source.item_type, spec.source.item_id) == ("ingest", "ingest_jobs", "job-9")
    assert (spec.check.type, spec.check.expr) == ("cel", ingest.CONDITION)
    assert spec.max_wakes == 1 and spec.interval_seconds == 300 and notes == []


@pytest.mark.parametrize("extra, named", [
    ({"check": {"type": "cel", "expr": "doc.status == 'queued'"}}, "check"),
    ({"condition": "it is done"}, "condition"),
    ({"check": {"type": "change"}, "judge_model": "m"}, "check or judge_model"),
])
def test_ingest_watch_ignores_a_check_given_and_says_so(extra, named):
    spec, notes = create(ingest_watch(**extra))
    assert spec.check.expr == ingest.CONDITION and spec.condition == "" and spec.judge_model == ""
    assert notes == [f"An ingest watch takes no {named}: the job ending (status done or failed) is the event, so "
                     f"{'it was' if ' or ' not in named else 'they were'} ignored."]


def test_ingest_watch_interval_given_is_ignored_with_a_note():
    spec, notes = create(ingest_watch(interval="2h"))
    assert spec.interval_seconds == 300
    assert notes == ["A document is checked each time it is written (and read again every 5m), so interval was "
                     "ignored."]


def test_ingest_source_takes_no_item_type():
    message = refusal({"description": "x", "source": {"type": "ingest", "item_type": "ct:x", "item_id": "1"}})
    assert message.startswith("source has an unknown field 'item_type'")


def test_ingest_item_id_rules_are_the_documents():
    assert refusal(ingest_watch() | {"source": {"type": "ingest", "item_id": " j"}}).startswith(
        "source.item_id must be printable text")
    assert refusal({"description": "x", "source": {"type": "ingest"}}).startswith("source.item_id is required")


@pytest.mark.parametrize("status, ends", [("done", True), ("failed", True), ("running", False), ("queued", False)])
def test_ingest_condition_holds_only_for_an_ending(status, ends):
    from engine.checks.cel import decide_here

    assert decide_here(ingest.CONDITION, {"doc": {"status": status}}) is ends
    assert decide_here(ingest.CONDITION, {"doc": {"progress": 0.5}}) is False


# --- time watches: claimed again every TIME_RETRY_SECONDS -----------------------------------------------------------

@pytest.mark.parametrize("source", [{"type": "time", "delay": "30m"},
                                    {"type": "time", "fire_at": "2026-12-01T17:00:00Z"}])
def test_time_watch_interval_is_the_retry_interval(source):
    spec, notes = create({"description": "stand-up", "source": source})
    assert TIME_RETRY_SECONDS == 30
    assert spec.interval_seconds == TIME_RETRY_SECONDS and spec.max_wakes == 1 and notes == []
    assert spec.check.type == "every_call"


def test_time_watch_given_interval_is_ignored_and_retry_interval_kept():
    spec, notes = create({"description": "x", "source": {"type": "time", "delay": "30m"}, "interval": "2h"})
    assert spec.interval_seconds == TIME_RETRY_SECONDS
    assert notes == ["A time watch takes no interval: it fires once at its time, so it was ignored."]
