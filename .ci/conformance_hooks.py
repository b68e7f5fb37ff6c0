"""Schemathesis hooks for .ci/conformance.sh (loaded through SCHEMATHESIS_HOOKS).

Generated requests name collections, partitions and tokens at random, so most valid ones
would only ever reach `404 unknown_collection` or `404 superseded`. These hooks steer
most of them onto the data the script imported, with the live head tokens read from the
server just before each request, so the success paths are exercised too:

* `before_call`: in a request whose path parameters were generated valid (positive), a
  stable share (`CONFORMANCE_STEER` percent, chosen from the generated values, so a seed
  still reproduces a run) gets a real collection or partition, the head token of it for
  `snapshots/{token}` and `deltas/{base}/{target}` (and an older version of the same epoch
  as `base`), and a valid body where JSON Schema cannot say what the server requires
  (`seq` strictly increasing integer literals, a PUT body's `id` equal to the path's, each
  id once in a batch; an attachment upload sent whole, its `{hash}` the SHA-256 of the
  body). Invalid (negative) parts of a request are never touched, so negative
  testing goes on - deeper, as a real path lets an invalid body reach its validation. The
  rest of the requests keep their generated values (unknown names, other epochs, ...).
  Schemathesis revalidates a case after this hook, and every response is still checked
  against docs/openapi.yaml as it comes.
* `after_call`: appends one line per request to `CONFORMANCE_COUNTS`
  (`method<TAB>path template<TAB>mode<TAB>status<TAB>declared`), which
  .ci/conformance_report.py turns into the per-operation 2xx lines.

Environment (set by .ci/conformance.sh):
  CONFORMANCE_URL          the server, http://127.0.0.1:PORT
  CONFORMANCE_AUTH         the Authorization header value the run sends ("Bearer ...")
  CONFORMANCE_COLLECTIONS  collections to steer to, space-separated (`countries items`)
  CONFORMANCE_PARTITIONS   partitions NAME/KEY to steer to, space-separated (those the
                           run's token cannot read are left out)
  CONFORMANCE_MEMBERSHIPS  the memberships collection of the rules (`members`)
  CONFORMANCE_STEER        percent of valid requests steered (default 80)
  CONFORMANCE_COUNTS       where after_call appends its lines
"""

from __future__ import annotations

import hashlib
import os
import re
import urllib.error
import urllib.parse
import urllib.request
import zlib
from typing import Any

import schemathesis
from schemathesis.core import NotSet
from schemathesis.core.parameters import ParameterLocation
from schemathesis.generation import GenerationMode
from schemathesis.transport.serialization import serialize_binary

BASE_URL = os.environ.get("CONFORMANCE_URL", "").rstrip("/")
AUTH = os.environ.get("CONFORMANCE_AUTH", "")
COLLECTIONS = os.environ.get("CONFORMANCE_COLLECTIONS", "").split()
PARTITIONS = [tuple(p.split("/", 1)) for p in os.environ.get("CONFORMANCE_PARTITIONS", "").split() if "/" in p]
MEMBERSHIPS = os.environ.get("CONFORMANCE_MEMBERSHIPS", "")
STEER_PERCENT = int(os.environ.get("CONFORMANCE_STEER", "80"))
COUNTS = os.environ.get("CONFORMANCE_COUNTS", "")

# Record ids the imported data holds, so some history requests name a record that exists.
KNOWN_IDS = {
    "countries": ["AD", "FR"],
    "items": ["r0000001", "a"],
    "attempts": ["a1", "b1"],
    "sets": ["q1"],
}
TOKEN = re.compile(r"^([0-9a-f]{16})\.([1-9][0-9]*)$")
CLIENT = re.compile(r"[A-Za-z0-9._:-]{1,128}")
WRITES = {"PUT", "POST", "DELETE"}


def _stable(*parts: Any) -> int:
    """A number fixed by the generated values, so the same seed steers the same way."""
    return zlib.crc32(repr(parts).encode("utf-8", "surrogatepass"))


def _is_positive(case: Any, location: ParameterLocation) -> bool:
    meta = case.meta
    if meta is None:
        return False
    component = meta.components.get(location)
    if component is not None:
        return not component.mode.is_negative
    return meta.generation.mode == GenerationMode.POSITIVE


def _head_token(path: str) -> str | None:
    """The current token of the collection or partition at `path`, from its ETag."""
    request = urllib.request.Request(BASE_URL + path, method="HEAD")
    if AUTH:
        request.add_header("Authorization", AUTH)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            etag = response.headers.get("ETag", "")
    except (urllib.error.URLError, OSError):
        return None
    token = etag.strip('"')
    return token if TOKEN.match(token) else None


def _readable(name: str, key: str) -> bool:
    return _head_token(f"/v1/collections/{name}/partitions/{key}") is not None


_partitions_readable: list[tuple[str, str]] | None = None


def _partitions() -> list[tuple[str, str]]:
    """The listed partitions this run's token may read (looked up once)."""
    global _partitions_readable
    if _partitions_readable is None:
        _partitions_readable = [p for p in PARTITIONS if _readable(*p)] or list(PARTITIONS)
    return _partitions_readable


def _steer_path(case: Any, pick: int) -> None:
    params = case.path_parameters
    if not params or "name" not in params:
        return
    method = case.method.upper()
    template = case.operation.path
    if "key" in params:
        choices = _partitions()
        if method in WRITES and MEMBERSHIPS:
            # A memberships partition takes only records that grant something (a `role` of
            # `read` or `write`, an id `NAME/KEY`): one steered write in eight goes there with
            # its generated body (mostly a `400 bad_membership`), the others where any record
            # will do.
            members = [p for p in choices if p[0] == MEMBERSHIPS]
            others = [p for p in choices if p[0] != MEMBERSHIPS]
            if members and (pick % 8 == 0 or not others):
                choices = members
            elif others:
                choices = others
        if not choices or (params.get("name"), params.get("key")) in choices:
            return
        params["name"], params["key"] = choices[pick % len(choices)]
    else:
        if not COLLECTIONS or params.get("name") in COLLECTIONS:
            return
        params["name"] = COLLECTIONS[pick % len(COLLECTIONS)]
    if "id" in params and template.endswith("/history") and (pick >> 4) % 2 == 0:
        known = KNOWN_IDS.get(params["name"])
        if known:
            params["id"] = known[(pick >> 5) % len(known)]


def _steer_tokens(case: Any, pick: int) -> None:
    params = case.path_parameters
    # (`/v1/uploads/{token}` names an upload, not a collection's state.)
    if not params or "name" not in params or not ({"token", "target"} & params.keys()):
        return
    path = f"/v1/collections/{params['name']}" + (f"/partitions/{params['key']}" if "key" in params else "")
    head = _head_token(path)
    if head is None:
        return
    epoch, version = TOKEN.match(head).groups()
    if "token" in params:
        params["token"] = head
    if "target" in params:
        params["target"] = head
        choice = (pick >> 8) % 4
        if choice in (0, 1):
            # An older version of this epoch: the delta from it (or `308` below the floor).
            params["base"] = f"{epoch}.{1 + (pick >> 10) % int(version)}"
        elif choice == 2:
            params["base"] = head  # an empty delta
        # otherwise the generated base: another epoch, a `308` to the full body


def _steer_upload(case: Any) -> None:
    """An attachment upload sent whole, its `{hash}` the SHA-256 of the bytes sent: a `201`."""
    if case.method.upper() not in ("PUT", "POST") or not case.operation.path.endswith("/attachments/{hash}"):
        return
    if isinstance(case.body, NotSet) or not _is_positive(case, ParameterLocation.HEADER):
        return
    case.path_parameters["hash"] = hashlib.sha256(serialize_binary(case.body)).hexdigest()
    for name in ("Upload-Complete", "Upload-Incomplete", "Upload-Length"):
        if case.headers:
            case.headers.pop(name, None)


def _fix_body(case: Any, pick: int) -> None:
    body = case.body
    template = case.operation.path
    method = case.method.upper()
    if method == "PUT" and template.endswith("/records/{id}") and isinstance(body, dict):
        # Path parameters are kept percent-encoded, as sent; the server decodes the id.
        path_id = urllib.parse.unquote(case.path_parameters.get("id", ""))
        if "id" in body and body["id"] != path_id:
            body["id"] = path_id
    elif method == "POST" and template.endswith("/records"):
        records = body if isinstance(body, list) else None
        if records is not None:
            seen: set[Any] = set()
            kept = []
            for record in records:
                rid = record.get("id") if isinstance(record, dict) else None
                if rid in seen:
                    continue
                seen.add(rid)
                kept.append(record)
            records[:] = kept
            if not kept and isinstance(case.query, dict) and case.query.get("replace") in ("true", "1"):
                case.query["replace"] = "false"
    elif method == "POST" and template.endswith("/mutations") and isinstance(body, dict):
        client = body.get("client")
        if not isinstance(client, str) or not CLIENT.fullmatch(client):
            body["client"] = f"conformance-{pick % 1000}"
        mutations = body.get("mutations")
        if isinstance(mutations, list):
            seq = 1 + (pick >> 12) % 1000
            for mutation in mutations:
                if isinstance(mutation, dict):
                    mutation["seq"] = seq  # an integer literal, strictly increasing
                    seq += 1 + (pick >> 3) % 3


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    operation = case.operation
    if "not-allowed" in (operation.tags or []) or case.method.upper() != operation.method.upper():
        return
    if case.meta is None:
        return
    body = "" if isinstance(case.body, NotSet) else repr(case.body)[:4096]
    pick = _stable(case.method, operation.path, sorted((case.path_parameters or {}).items()), sorted((case.query or {}).items()), body)
    if pick % 100 >= STEER_PERCENT:
        return
    if _is_positive(case, ParameterLocation.PATH):
        _steer_path(case, pick)
        _steer_tokens(case, pick)
        _steer_upload(case)
    if not isinstance(case.body, NotSet) and _is_positive(case, ParameterLocation.BODY):
        _fix_body(case, pick)


@schemathesis.hook
def after_call(context: Any, case: Any, response: Any) -> None:
    if not COUNTS:
        return
    operation = case.operation
    mode = case.meta.generation.mode.value if case.meta is not None else "none"
    declared = "yes" if case.method.upper() == operation.method.upper() else "no"
    with open(COUNTS, "a", encoding="utf-8") as out:
        out.write(f"{operation.method.upper()}\t{operation.path}\t{mode}\t{response.status_code}\t{declared}\n")
