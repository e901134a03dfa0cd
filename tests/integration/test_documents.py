"""PUT/GET/DELETE /api/documents (seed 001's dynadata_doc store) and the watches on documents: every status the
API answers, with nothing stored by a refusal; one account never sees nor wakes another's; a document watch wakes
once when a write makes its CEL condition true, carrying its note and a snapshot; evaluation failures end it in
error; the sweep catches conditions on `now` and lost check messages; ingest jobs; the daily fire cap."""

from __future__ import annotations

import json
from datetime import timedelta

from models import utcnow
from models.tables import Document, Monitor
from tests.integration.helpers import db, login, monitor_row, tool, wakes, wait_for

JOB = "transcription_jobs/job-1"
#: far enough past DOCUMENT_SWEEP_SECONDS (300) for its ±10% jitter and the busy-minute shift to have passed
PAST_THE_SWEEP = 300 + 30 + 60 + 30


def auth(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def put(client, token, path: str = JOB, doc: object = None, **headers):
    return client.put(f"/api/documents/{path}", headers={**auth(token), **headers}, json=doc)


def put_raw(client, token, path: str, body: bytes, **headers):
    return client.put(f"/api/documents/{path}", headers={**auth(token), "Content-Type": "application/json", **headers},
                      content=body)


def stored(user, path: str = JOB) -> tuple[int, dict] | None:
    """The stored version and document, read from the database (not through the API under test)."""
    item_type, item_id = path.split("/", 1)
    with db():
        row = Document.get_or_none((Document.user == user.id) & (Document.item_type == item_type)
                                   & (Document.item_id == item_id))
    return None if row is None else (row.version, json.loads(row.body))


def document_count() -> int:
    with db():
        return Document.select().count()


def watch(client, token, expr: str, item_type: str = "transcription_jobs", item_id: str = "job-1",
          conversation: str = "conv-1", **arguments) -> dict:
    """A document watch armed through the tool, its first check done."""
    body = tool(client, token, "monitor_create", {
        "description": "the transcription is done", "source": {"type": "document", "item_type": item_type,
                                                                "item_id": item_id},
        "check": {"type": "cel", "expr": expr}, **arguments}, conversation=conversation).json()
    assert body["ok"] is True, body
    return body["result"]


def ingest_watch(client, token, item_id: str = "ing-1", **arguments) -> dict:
    body = tool(client, token, "monitor_create", {"description": "the upload is ingested",
                                                  "source": {"type": "ingest", "item_id": item_id},
                                                  **arguments}).json()
    assert body["ok"] is True, body
    return body["result"]


DONE = "has(doc.status) && doc.status == 'done'"


# --- the documents API -------------------------------------------------------------------------------------


def test_put_creates_version_one_then_counts_up_and_get_answers_it_with_its_etag_or_304(client, owner):
    first = put(client, owner[1], doc={"status": "queued", "lang": "pt"})
    assert first.status_code == 201 and first.headers["etag"] == '"1"' and first.json()["version"] == 1
    second = put(client, owner[1], doc={"status": "running"})
    assert second.status_code == 200 and second.headers["etag"] == '"2"' and second.json()["version"] == 2
    got = client.get(f"/api/documents/{JOB}", headers=auth(owner[1]))
    assert got.status_code == 200 and got.headers["etag"] == '"2"'
    body = got.json()
    assert body["doc"] == {"status": "running"}  # a PUT replaces the document, it does not merge
    assert (body["item_type"], body["item_id"], body["version"]) == ("transcription_jobs", "job-1", 2)
    assert body["created_at"].endswith("Z") and body["updated_at"] >= body["created_at"]
    assert stored(owner[0]) == (2, {"status": "running"})
    same = client.get(f"/api/documents/{JOB}", headers={**auth(owner[1]), "If-None-Match": '"2"'})
    assert same.status_code == 304 and same.content == b"" and same.headers["etag"] == '"2"'
    old = client.get(f"/api/documents/{JOB}", headers={**auth(owner[1]), "If-None-Match": '"1"'})
    assert old.status_code == 200 and old.json()["doc"] == {"status": "running"}
    assert client.get("/api/documents/transcription_jobs/job-2", headers=auth(owner[1])).status_code == 404


def test_put_with_a_stale_if_match_is_412_and_changes_nothing(client, owner):
    put(client, owner[1], doc={"n": 1})
    put(client, owner[1], doc={"n": 2})
    stale = put(client, owner[1], doc={"n": "lost update"}, **{"If-Match": '"1"'})
    assert stale.status_code == 412
    assert "version 2" in stale.json()["detail"] and "If-Match" in stale.json()["detail"]
    assert stored(owner[0]) == (2, {"n": 2})
    current = put(client, owner[1], doc={"n": 3}, **{"If-Match": '"2"'})
    assert current.status_code == 200 and current.headers["etag"] == '"3"'
    assert stored(owner[0]) == (3, {"n": 3})
    missing = put(client, owner[1], "transcription_jobs/job-2", {"n": 1}, **{"If-Match": '"1"'})
    assert missing.status_code == 412 and "no document" in missing.json()["detail"]
    assert stored(owner[0], "transcription_jobs/job-2") is None


def test_put_with_if_none_match_star_creates_only(client, owner):
    created = put(client, owner[1], doc={"n": 1}, **{"If-None-Match": "*"})
    assert created.status_code == 201
    again = put(client, owner[1], doc={"n": 2}, **{"If-None-Match": "*"})
    assert again.status_code == 412 and "exists (version 1)" in again.json()["detail"]
    assert stored(owner[0]) == (1, {"n": 1})


NOT_OBJECTS = [(b"[1, 2]", "this body is an array"), (b'"done"', "this body is a string"),
               (b"42", "this body is a number"), (b"null", "this body is null"), (b'{"status": ', "not valid JSON"),
               (b"", "body is empty")]


def test_put_of_anything_but_a_json_object_is_400_and_changes_nothing(client, owner):
    put(client, owner[1], "ct:orders/o-1", {"kept": True})
    for body, says in NOT_OBJECTS:
        refused = put_raw(client, owner[1], "ct:orders/o-1", body)
        assert refused.status_code == 400 and says in refused.json()["detail"], (body, refused.text)
        assert put_raw(client, owner[1], "ct:orders/o-2", body).status_code == 400, body
    assert stored(owner[0], "ct:orders/o-1") == (1, {"kept": True})
    assert stored(owner[0], "ct:orders/o-2") is None


def test_put_of_json_outside_the_standard_is_400_and_stores_nothing(client, owner):
    for body in (b'{"a": NaN}', b'{"a": Infinity}', b'{"a": -Infinity}', b'{"a": 1e400}', b'{"a": "\\ud800"}'):
        refused = put_raw(client, owner[1], JOB, body)
        assert refused.status_code == 400, (body, refused.status_code, refused.text)
    assert stored(owner[0]) is None


def test_put_over_document_max_bytes_is_413_and_changes_nothing(client, owner, reconfigure):
    reconfigure(DOCUMENT_MAX_BYTES=1000)
    put(client, owner[1], doc={"small": True})
    refused = put(client, owner[1], doc={"text": "x" * 2000})
    assert refused.status_code == 413 and "DOCUMENT_MAX_BYTES" in refused.json()["detail"]
    assert stored(owner[0]) == (1, {"small": True})


def test_a_document_of_exactly_one_mib_is_stored_and_one_byte_more_is_413(client, owner):
    envelope = len(b'{"text":""}')
    exactly = b'{"text":"' + b"x" * (1024 * 1024 - envelope) + b'"}'
    assert len(exactly) == 1024 * 1024
    assert put_raw(client, owner[1], JOB, exactly).status_code == 201
    over = b'{"text":"' + b"x" * (1024 * 1024 - envelope + 1) + b'"}'
    refused = put_raw(client, owner[1], JOB, over)
    assert refused.status_code == 413
    version, doc = stored(owner[0])
    assert version == 1 and len(doc["text"]) == 1024 * 1024 - envelope


def test_an_item_type_vigil_does_not_keep_is_400_on_every_method(client, owner):
    for path in ("users/u-1", "ct:Orders/o-1", "ct:/o-1", "Transcription_jobs/j", "ct:a b/o-1"):
        refused = put(client, owner[1], path, {"n": 1})
        assert refused.status_code == 400, path
        assert "transcription_jobs, transcode_jobs, ingest_jobs, or ct:<name>" in refused.text
        assert client.get(f"/api/documents/{path}", headers=auth(owner[1])).status_code == 400, path
        assert client.delete(f"/api/documents/{path}", headers=auth(owner[1])).status_code == 400, path
    assert document_count() == 0


def test_every_allowed_item_type_is_stored_and_an_item_id_may_hold_slashes(client, owner):
    for path in ("transcription_jobs/a", "transcode_jobs/a", "ingest_jobs/a", "ct:orders.v2_x-y/a"):
        assert put(client, owner[1], path, {"n": 1}).status_code == 201, path
    assert put(client, owner[1], "ct:files/folder/sub/report.pdf", {"n": 1}).status_code == 201
    got = client.get("/api/documents/ct:files/folder/sub/report.pdf", headers=auth(owner[1])).json()
    assert got["item_id"] == "folder/sub/report.pdf"
    assert stored(owner[0], "ct:files/folder/sub/report.pdf") == (1, {"n": 1})
    assert document_count() == 5


def test_delete_is_204_then_the_document_is_gone(client, owner):
    put(client, owner[1], doc={"n": 1})
    deleted = client.delete(f"/api/documents/{JOB}", headers=auth(owner[1]))
    assert deleted.status_code == 204
    assert client.get(f"/api/documents/{JOB}", headers=auth(owner[1])).status_code == 404
    assert stored(owner[0]) is None
    assert client.delete(f"/api/documents/{JOB}", headers=auth(owner[1])).status_code == 404
    recreated = put(client, owner[1], doc={"n": 2})
    assert recreated.status_code == 201 and recreated.headers["etag"] == '"1"'


def test_delete_with_a_stale_if_match_is_412_and_keeps_the_document(client, owner):
    put(client, owner[1], doc={"n": 1})
    put(client, owner[1], doc={"n": 2})
    refused = client.delete(f"/api/documents/{JOB}", headers={**auth(owner[1]), "If-Match": '"1"'})
    assert refused.status_code == 412 and "nothing was deleted" in refused.json()["detail"]
    assert stored(owner[0]) == (2, {"n": 2})
    assert client.delete(f"/api/documents/{JOB}", headers={**auth(owner[1]), "If-Match": '"2"'}).status_code == 204


def test_without_credentials_is_401_and_stores_nothing(client, owner):
    assert client.put(f"/api/documents/{JOB}", json={"n": 1}).status_code == 401
    assert client.put(f"/api/documents/{JOB}", json={"n": 1},
                      headers={"Authorization": "Bearer not-a-token"}).status_code == 401
    assert client.get(f"/api/documents/{JOB}").status_code == 401
    assert document_count() == 0


def test_the_owners_session_writes_with_csrf_and_is_refused_without(client, owner):
    csrf = login(client)
    refused = client.put(f"/api/documents/{JOB}", json={"n": 1})
    assert refused.status_code == 403 and stored(owner[0]) is None
    written = client.put(f"/api/documents/{JOB}", json={"n": 1}, headers={"X-CSRF-Token": csrf})
    assert written.status_code == 201
    assert client.get(f"/api/documents/{JOB}").json()["doc"] == {"n": 1}  # a read needs no CSRF token
    assert client.delete(f"/api/documents/{JOB}").status_code == 403
    assert stored(owner[0]) == (1, {"n": 1})
    assert client.delete(f"/api/documents/{JOB}", headers={"X-CSRF-Token": csrf}).status_code == 204


# --- one account, another ----------------------------------------------------------------------------------


def test_another_accounts_document_is_404_and_its_delete_changes_nothing(client, owner, stranger):
    put(client, owner[1], doc={"secret": "owner's"})
    assert client.get(f"/api/documents/{JOB}", headers=auth(stranger[1])).status_code == 404
    assert client.delete(f"/api/documents/{JOB}", headers=auth(stranger[1])).status_code == 404
    assert stored(owner[0]) == (1, {"secret": "owner's"})


def test_a_strangers_write_of_the_same_ids_is_their_own_and_wakes_no_watch_of_the_owner(client, owner, stranger,
                                                                                     drain):
    result = watch(client, owner[1], DONE)
    drain()
    theirs = put(client, stranger[1], doc={"status": "done"})
    assert theirs.status_code == 201 and theirs.json()["watches_checked"] == 0
    drain()
    assert wakes(result["monitor_id"]) == []
    assert stored(owner[0]) is None and stored(stranger[0]) == (1, {"status": "done"})
    assert client.get(f"/api/documents/{JOB}", headers=auth(owner[1])).status_code == 404
    assert monitor_row(result["monitor_id"]).status == "active"
    mine = put(client, owner[1], doc={"status": "done"})
    assert mine.status_code == 201 and mine.json()["watches_checked"] == 1
    drain()
    assert len(wakes(result["monitor_id"])) == 1


# --- document watches --------------------------------------------------------------------------------------


def test_a_write_that_makes_the_condition_true_wakes_once_with_the_note_and_a_snapshot(client, owner, drain):
    result = watch(client, owner[1], DONE, note="Send the transcript to the user.\nThen ask about the summary.",
                   max_wakes=3)
    drain()
    assert put(client, owner[1], doc={"status": "running", "progress": 40}).json()["watches_checked"] == 1
    drain()
    assert wakes(result["monitor_id"]) == []
    put(client, owner[1], doc={"status": "done", "outputs": {"txt": "s3://bucket/job-1.txt"}})
    drain()
    [wake] = wakes(result["monitor_id"])
    assert wake.content.startswith("Monitor fired: the transcription is done")
    assert "transcription_jobs/job-1 (version 2) now matches" in wake.content
    assert "s3://bucket/job-1.txt" in wake.content  # the snapshot, quoted
    assert wake.content.endswith("Send the transcript to the user.\nThen ask about the summary.")  # verbatim
    assert wake.metadata["note"] == "Send the transcript to the user.\nThen ask about the summary."
    assert wake.metadata["document"] == {
        "item_type": "transcription_jobs", "item_id": "job-1", "version": 2, "truncated": False,
        "doc": {"status": "done", "outputs": {"txt": "s3://bucket/job-1.txt"}}}

    put(client, owner[1], doc={"status": "done", "outputs": {"txt": "s3://bucket/job-1-v2.txt"}})  # still true
    drain()
    assert len(wakes(result["monitor_id"])) == 1  # edge-triggered: it stays true, nothing new to say
    monitor = monitor_row(result["monitor_id"])
    assert monitor.status == "active" and monitor.wakes_used == 1


def test_a_condition_that_becomes_false_and_true_again_wakes_again(client, owner, drain):
    result = watch(client, owner[1], DONE, max_wakes=3)
    for status in ("done", "running", "done"):
        put(client, owner[1], doc={"status": status})
        drain()
    assert [w.metadata["document"]["version"] for w in wakes(result["monitor_id"])] == [1, 3]


def test_a_watch_on_a_document_that_already_matches_fires_on_its_first_check(client, owner, drain):
    put(client, owner[1], doc={"status": "done"})
    result = watch(client, owner[1], DONE)
    assert result["status"] == "active" and result["condition"] == DONE  # armed; not evaluated at create
    drain()  # no write since: its first check, queued at create, finds it true
    [wake] = wakes(result["monitor_id"])
    assert wake.metadata["document"]["doc"] == {"status": "done"}
    assert monitor_row(result["monitor_id"]).status == "done"  # one wake (max_wakes 1): it has ended
    assert put(client, owner[1], doc={"status": "running"}).json()["watches_checked"] == 0
    put(client, owner[1], doc={"status": "done"})
    drain()
    assert len(wakes(result["monitor_id"])) == 1


def test_a_watch_on_a_missing_document_says_so_and_waits(client, owner, drain, run_due_checks):
    result = watch(client, owner[1], DONE)
    assert any("There is no document transcription_jobs/job-1 yet" in note for note in result["notes"])
    drain()
    run_due_checks(PAST_THE_SWEEP)  # the sweep reads it again: still nothing
    monitor = monitor_row(result["monitor_id"])
    assert monitor.status == "active" and monitor.failure_count == 0 and wakes() == []
    put(client, owner[1], doc={"status": "done"})
    drain()
    assert len(wakes(result["monitor_id"])) == 1
    assert not any("no document" in note for note in watch(client, owner[1], DONE)["notes"])  # it exists now


GUARDED = ["has(doc.outputs) && has(doc.outputs.txt) && doc.outputs.txt != ''",
           "maps.get(doc, 'outputs.txt', '') != ''"]


def test_a_guarded_condition_on_a_missing_field_is_false_and_keeps_waiting(client, owner, drain):
    ids = [watch(client, owner[1], expr, item_id=f"job-{n}")["monitor_id"] for n, expr in enumerate(GUARDED)]
    for doc in ({"status": "queued"}, {"status": "running", "outputs": {}}, {"status": "running"},
                {"outputs": {"txt": ""}}):
        for n in range(len(GUARDED)):
            put(client, owner[1], f"transcription_jobs/job-{n}", doc)
        drain()
    for monitor_id in ids:
        monitor = monitor_row(monitor_id)
        assert monitor.status == "active" and monitor.failure_count == 0 and monitor.last_error == ""
    assert wakes() == []
    for n in range(len(GUARDED)):
        put(client, owner[1], f"transcription_jobs/job-{n}", {"status": "done", "outputs": {"txt": "hello"}})
    drain()
    for monitor_id in ids:
        [wake] = wakes(monitor_id)
        assert wake.metadata["document"]["doc"]["outputs"] == {"txt": "hello"}


def test_three_failed_evaluations_in_a_row_end_the_watch_in_error_and_tell_once(client, owner, drain):
    result = watch(client, owner[1], "doc.outputs.txt != ''", note="Fetch the text.")
    drain()  # no document yet: quiet, not a failure
    for n in range(3):
        put(client, owner[1], doc={"status": "running", "step": n})
        drain()
    monitor = monitor_row(result["monitor_id"])
    assert monitor.status == "error" and "failed to evaluate 3 times in a row" in monitor.last_error
    [told] = wakes(result["monitor_id"])
    assert told.metadata["wake"]["source"] == "monitor_error"
    assert told.content.startswith("Monitor stopped with an error: the transcription is done.")
    assert "will not resume" in told.content and told.content.endswith("Fetch the text.")

    later = put(client, owner[1], doc={"status": "done", "outputs": {"txt": "hello"}})  # would be true now
    assert later.json()["watches_checked"] == 0
    drain()
    assert len(wakes(result["monitor_id"])) == 1 and monitor_row(result["monitor_id"]).status == "error"
    got = client.get(f"/api/monitors/{result['monitor_id']}", headers=auth(owner[1])).json()
    assert got["monitorState"] == "error"


def test_a_successful_evaluation_between_failures_resets_the_count(client, owner, drain):
    result = watch(client, owner[1], "doc.outputs.txt != ''")
    for doc in ({"a": 1}, {"a": 2}, {"outputs": {"txt": ""}}, {"a": 3}, {"a": 4}):  # fail, fail, false, fail, fail
        put(client, owner[1], doc=doc)
        drain()
    monitor = monitor_row(result["monitor_id"])
    assert monitor.status == "active" and monitor.failure_count == 2
    assert wakes() == []


def test_a_condition_on_now_fires_on_the_sweep_without_a_write(client, owner, drain, run_due_checks):
    due = utcnow() + timedelta(seconds=3)
    result = watch(client, owner[1], "timestamp(doc.due) < now")
    put(client, owner[1], doc={"due": due.strftime("%Y-%m-%dT%H:%M:%S.%fZ")})
    drain()
    assert wakes() == []  # not yet due when its write was checked
    wait_for(lambda: utcnow() > due + timedelta(milliseconds=200), timeout=10)  # the check's `now` is the wall clock
    run_due_checks(60)
    assert wakes() == [], "checked before its sweep is due"
    run_due_checks(PAST_THE_SWEEP)
    [wake] = wakes(result["monitor_id"])
    assert wake.metadata["document"]["version"] == 1
    assert stored(owner[0])[0] == 1  # no write made it fire


def test_a_write_whose_check_message_is_lost_is_caught_by_the_sweep(client, owner, drain, run_due_checks,
                                                                    monkeypatch):
    from tasks.checks import check_monitors

    result = watch(client, owner[1], DONE, note="Deliver it.")
    drain()
    with monkeypatch.context() as lossy:
        lossy.setattr(check_monitors, "send", lambda *args, **kwargs: None)  # the broker loses the message
        assert put(client, owner[1], doc={"status": "done"}).json()["watches_checked"] == 1
    drain()
    assert wakes() == []
    run_due_checks(PAST_THE_SWEEP)
    [wake] = wakes(result["monitor_id"])
    assert wake.content.endswith("Deliver it.") and wake.metadata["document"]["doc"] == {"status": "done"}


def test_delete_keeps_the_watch_armed_and_a_new_document_can_fire_it(client, owner, drain, run_due_checks):
    result = watch(client, owner[1], DONE)
    put(client, owner[1], doc={"status": "running"})
    drain()
    assert client.delete(f"/api/documents/{JOB}", headers=auth(owner[1])).status_code == 204
    run_due_checks(PAST_THE_SWEEP)  # the sweep finds no document: quiet
    monitor = monitor_row(result["monitor_id"])
    assert monitor.status == "active" and monitor.failure_count == 0 and wakes() == []
    again = put(client, owner[1], doc={"status": "done"})
    assert again.status_code == 201 and again.json()["watches_checked"] == 1
    drain()
    [wake] = wakes(result["monitor_id"])
    assert wake.metadata["document"]["version"] == 1


def test_a_version_that_fails_to_evaluate_counts_once_however_many_sweeps_read_it(client, owner, drain,
                                                                                   run_due_checks):
    result = watch(client, owner[1], "doc.outputs.txt != ''")
    put(client, owner[1], doc={"status": "running"})
    drain()
    assert monitor_row(result["monitor_id"]).failure_count == 1
    for _ in range(3):  # three sweeps read the same version: the same failure, not three more
        run_due_checks(PAST_THE_SWEEP)
    monitor = monitor_row(result["monitor_id"])
    assert monitor.status == "active" and monitor.failure_count == 1 and wakes() == []
    put(client, owner[1], doc={"status": "done", "outputs": {"txt": "hello"}})  # a new version: evaluated
    drain()
    [wake] = wakes(result["monitor_id"])
    assert wake.metadata["document"]["version"] == 2


def test_a_document_deleted_while_its_condition_held_wakes_again_when_written_anew(client, owner, drain):
    result = watch(client, owner[1], DONE, max_wakes=2)
    put(client, owner[1], doc={"status": "done"})
    drain()
    assert len(wakes(result["monitor_id"])) == 1
    put(client, owner[1], doc={"status": "done", "n": 2})  # still true: no second wake
    drain()
    assert len(wakes(result["monitor_id"])) == 1
    assert client.delete(f"/api/documents/{JOB}", headers=auth(owner[1])).status_code == 204
    put(client, owner[1], doc={"status": "done", "n": 3})  # a new document: a new fact
    drain()
    assert len(wakes(result["monitor_id"])) == 2 and monitor_row(result["monitor_id"]).status == "done"


def test_a_watch_without_a_cel_check_is_refused_and_nothing_is_created(client, owner):
    for arguments in ({}, {"check": {"type": "change"}}, {"check": {"type": "cel", "expr": "doc.status =="}}):
        body = tool(client, owner[1], "monitor_create", {
            "description": "x", "source": {"type": "document", "item_type": "transcription_jobs", "item_id": "j"},
            **arguments}).json()
        assert body["ok"] is False, arguments
    bad_type = tool(client, owner[1], "monitor_create", {
        "description": "x", "source": {"type": "document", "item_type": "users", "item_id": "j"},
        "check": {"type": "cel", "expr": DONE}}).json()
    assert bad_type["ok"] is False and "source.item_type must be one of" in bad_type["error"]
    with db():
        assert Monitor.select().count() == 0


# --- ingest watches ----------------------------------------------------------------------------------------


def test_an_ingest_job_ending_done_or_failed_wakes_once_naming_its_status(client, owner, drain):
    endings = {"ing-1": "done", "ing-2": "failed"}
    ids = {job: ingest_watch(client, owner[1], job, note="Tell the user about the upload.")["monitor_id"]
           for job in endings}
    for status in ("queued", "running"):
        for job in endings:
            put(client, owner[1], f"ingest_jobs/{job}", {"status": status})
        drain()
    assert wakes() == []
    for job, ending in endings.items():
        put(client, owner[1], f"ingest_jobs/{job}", {"status": ending, "rows": 120})
    drain()
    for job, ending in endings.items():
        [wake] = wakes(ids[job])
        assert f"The ingest job {job} ended: status '{ending}'" in wake.content
        assert wake.content.endswith("Tell the user about the upload.")
        assert wake.metadata["document"]["item_type"] == "ingest_jobs"
        put(client, owner[1], f"ingest_jobs/{job}", {"status": ending, "rows": 121})
    drain()
    assert all(len(wakes(m)) == 1 and monitor_row(m).status == "done" for m in ids.values())


def test_an_ingest_watch_ignores_a_check_and_says_so(client, owner, drain):
    result = ingest_watch(client, owner[1], check={"type": "cel", "expr": "doc.rows > 100.0"})
    assert any("An ingest watch takes no check" in note and "ignored" in note for note in result["notes"])
    put(client, owner[1], "ingest_jobs/ing-1", {"status": "running", "rows": 500})  # its check would be true
    drain()
    assert wakes() == []
    assert put(client, owner[1], "transcription_jobs/ing-1", {"status": "done"}).json()["watches_checked"] == 0
    drain()
    assert wakes() == []  # the same id of another type is another document
    put(client, owner[1], "ingest_jobs/ing-1", {"status": "done", "rows": 500})
    drain()
    assert len(wakes(result["monitor_id"])) == 1


# --- the daily fire cap ------------------------------------------------------------------------------------


def test_the_fire_past_the_daily_cap_ends_its_watch_in_error_told_once(client, owner, drain, run_due_checks,
                                                                      reconfigure):
    reconfigure(MONITOR_MAX_FIRES_PER_CONVERSATION_DAY=2)
    watches = [watch(client, owner[1], DONE, item_id=f"job-{n}", note=f"note {n}")["monitor_id"] for n in range(3)]
    elsewhere = watch(client, owner[1], DONE, item_id="job-9", conversation="conv-2")["monitor_id"]
    drain()
    for n in range(3):
        put(client, owner[1], f"transcription_jobs/job-{n}", {"status": "done"})
        drain()
    assert [len(wakes(m)) for m in watches[:2]] == [1, 1]
    over = monitor_row(watches[2])
    assert over.status == "error" and "woken 2 times in the last 24 hours" in over.last_error
    [told] = wakes(watches[2])
    assert told.metadata["wake"]["source"] == "monitor_error" and "the most a conversation may be" in told.content
    assert over.fire_count == 0 and over.wakes_used == 0  # it did not fire

    run_due_checks(PAST_THE_SWEEP)  # a later tick does not resume it
    put(client, owner[1], "transcription_jobs/job-2", {"status": "done", "again": True})
    drain()
    assert monitor_row(watches[2]).status == "error" and len(wakes(watches[2])) == 1

    put(client, owner[1], "transcription_jobs/job-9", {"status": "done"})  # the cap is per conversation
    drain()
    assert len(wakes(elsewhere)) == 1


def test_the_twenty_first_fire_of_a_conversation_in_a_day_is_refused_at_the_real_cap(client, owner, drain):
    fired = []
    for batch in range(2):  # ten at a time: the most a conversation may have armed
        ids = [watch(client, owner[1], DONE, item_id=f"job-{batch}-{n}")["monitor_id"] for n in range(10)]
        for n in range(10):
            put(client, owner[1], f"transcription_jobs/job-{batch}-{n}", {"status": "done"})
        drain()
        fired += ids
    assert all(monitor_row(m).status == "done" for m in fired) and len(wakes()) == 20
    last = watch(client, owner[1], DONE, item_id="job-21")["monitor_id"]
    put(client, owner[1], "transcription_jobs/job-21", {"status": "done"})
    drain()
    assert monitor_row(last).status == "error"
    [told] = wakes(last)
    assert told.metadata["wake"]["source"] == "monitor_error" and "woken 20 times" in told.content
