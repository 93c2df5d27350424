"""The client side of the protocol exists once: a second definition of its pieces fails here.

Why this test exists: the proxy, the Spark reader, the transaction coordinator and the test
clients each used to carry their own protocol version, ``pulsar://`` parsing, request-id
matching, lookup-redirect loop and CONNECT handshake (docs/architecture.md, "The client
layer"). This reads every module under src/ and the clients tests share (tests/support) and
names the file that defines one of them again. Tests that build frames by hand to test a
broker or the proxy (a CONNECT with a chosen version, say) are not client sides.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
HOME = {
    "PROTOCOL_VERSION": "src/magnetar/wire/commands.py",
    "service URL parsing": "src/magnetar/wire/urls.py",
    "request-id matching": "src/magnetar/wire/matching.py",
    "the lookup-redirect loop": "src/magnetar/wire/lookup.py",
    "the CONNECT handshake": "src/magnetar/wire/session.py",
}
LEFT_FOR_LATER: dict[tuple[str, str], str] = {}
"""Known second definitions, each with why it is still there (none now: the configuration's
advertised listeners are checked by wire.urls too)."""

_URL_PARSING = re.compile(r"removeprefix\(\s*[\"']pulsar|replace\(\s*[\"']pulsar://")
_URL_SPLITTING = re.compile(r"urlsplit|urlparse|partition\(\s*[\"']://[\"']\s*\)")
_PULSAR_SCHEME = re.compile(r"[\"']pulsar(\+ssl)?(://)?[\"']")
_REQUEST_MATCHING = re.compile(
    r"dict\[int,\s*asyncio\.Future\[pb\.BaseCommand\]\]"
    r"|\.pop\(rid\b"
    r"|getattr\(commands\.body\([^)]*\),\s*[\"']request_id[\"']"
)


def _sources() -> list[tuple[str, str]]:
    out = []
    for top in ("src/magnetar", "tests/support"):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if "/_gen/" not in rel:
                out.append((rel, path.read_text()))
    return out


def _found_in(text: str) -> set[str]:
    """The pieces of the client side ``text`` defines."""
    tree = ast.parse(text)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "PROTOCOL_VERSION" for t in targets):
                found.add("PROTOCOL_VERSION")
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "connect":
            # a CONNECT built with a number for its protocol version
            if any(
                kw.arg == "protocol_version" and isinstance(kw.value, ast.Constant)
                for kw in node.keywords
            ):
                found.add("PROTOCOL_VERSION")
        elif isinstance(node, ast.Compare):
            # a decision on a LOOKUP answer being a Redirect
            if any(
                isinstance(c, ast.Attribute) and c.attr == "Redirect"
                for c in [node.left, *node.comparators]
            ):
                found.add("the lookup-redirect loop")
    # taking a URL apart by its scheme
    if _URL_PARSING.search(text) or (_URL_SPLITTING.search(text) and _PULSAR_SCHEME.search(text)):
        found.add("service URL parsing")
    # a table of waiters keyed by request id, or an answer picked by its request id
    if _REQUEST_MATCHING.search(text):
        found.add("request-id matching")
    # a CONNECT built and its CONNECTED awaited
    if "commands.connect(" in text and ".CONNECTED" in text:
        found.add("the CONNECT handshake")
    return found


def test_each_piece_of_the_client_side_is_defined_once() -> None:
    again: dict[str, list[str]] = {}
    for rel, text in _sources():
        for what in _found_in(text):
            if rel != HOME[what] and (what, rel) not in LEFT_FOR_LATER:
                again.setdefault(what, []).append(rel)
    assert not again, "defined again outside its home: " + "; ".join(
        f"{what} (home: {HOME[what]}) in {', '.join(files)}" for what, files in again.items()
    )


def test_the_checks_find_what_they_look_for() -> None:
    """Each check finds its piece in its home, and in the shapes the copies had: none of
    them can pass for want of looking."""
    for what, home in HOME.items():
        # (the session builds CONNECT, the copies awaited it; the matcher's table is generic)
        if what not in ("the CONNECT handshake", "request-id matching"):
            assert what in _found_in((ROOT / home).read_text()), what
    copies = {
        "PROTOCOL_VERSION": "PROTOCOL_VERSION: Final = 20\n",
        "service URL parsing": 'host = url.removeprefix("pulsar://").rpartition(":")\n',
        "service URL parsing ": 'p = urlsplit(u)\nif p.scheme != "pulsar":\n    raise ValueError\n',
        "request-id matching": (
            "self._pending: dict[int, asyncio.Future[pb.BaseCommand]] = {}\n"
            "waiter = self._pending.pop(rid, None)\n"
        ),
        "the lookup-redirect loop": (
            "if r.response == pb.CommandLookupTopicResponse.Redirect:\n    pass\n"
        ),
        "the CONNECT handshake": (
            "w.write(frames.encode_command(commands.connect(client_version='x')))\n"
            "assert frame.type == pb.BaseCommand.CONNECTED\n"
        ),
    }
    for what, sample in copies.items():
        assert what.strip() in _found_in(sample), what
    assert "PROTOCOL_VERSION" in _found_in("commands.connect(protocol_version=20)\n")


# --- the admin REST client: one decoder of Pulsar's error body ----------------------------------

ADMIN_ERROR_HOMES = {
    ("src/magnetar/client/admin.py", "error_reason"): "the client layer's admin client",
    ("operator/magnetar_operator/pulsar.py", "error_reason"): (
        "the operator's own admin client: it imports nothing of magnetar (import-linter), so it "
        "keeps a copy of the same function; tests/unit/client/test_admin.py runs both on the "
        "same answers"
    ),
}
NOT_PULSAR_ERRORS = {
    ("operator/magnetar_operator/conditions.py", "holds"): "Kubernetes status conditions",
    ("operator/magnetar_operator/handlers.py", "_not_ready"): "Kubernetes status conditions",
    ("operator/magnetar_operator/kube.py", "_send"): "the Kubernetes API's Status object",
    (
        "operator/magnetar_operator/builders/function.py",
        "_pod_state",
    ): "Kubernetes container states",
}
"""Functions that read a ``reason`` that is not Pulsar's admin error body."""


def _admin_error_decoders(text: str) -> set[str]:
    """The functions of ``text`` that read a ``reason`` out of an answer: the constant
    ``"reason"`` in a function that decodes JSON, or looks ``"reason"`` up."""
    found = set()
    for fn in ast.walk(ast.parse(text)):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        nodes = list(ast.walk(fn))
        if not any(isinstance(n, ast.Constant) and n.value == "reason" for n in nodes):
            continue
        for n in nodes:
            if isinstance(n, ast.Call):
                name = getattr(n.func, "attr", None) or getattr(n.func, "id", None)
                first = n.args[0] if n.args else None
                if name in ("loads", "json") or (
                    name == "get" and isinstance(first, ast.Constant) and first.value == "reason"
                ):
                    found.add(fn.name)
            elif (
                isinstance(n, ast.Subscript)
                and isinstance(n.slice, ast.Constant)
                and n.slice.value == "reason"
                and isinstance(n.ctx, ast.Load)
            ):
                found.add(fn.name)
    return found


def test_pulsars_admin_error_body_is_decoded_once() -> None:
    """Four admin REST clients used to decode ``{"reason": ...}`` each their own way
    (docs/architecture.md, "The client layer"): src/, tests/support and the operator have
    the one function (and the operator's copy) only."""
    sources = _sources() + [
        (p.relative_to(ROOT).as_posix(), p.read_text())
        for p in sorted((ROOT / "operator/magnetar_operator").rglob("*.py"))
    ]
    again = sorted(
        f"{rel}: {name}"
        for rel, text in sources
        for name in _admin_error_decoders(text)
        if (rel, name) not in ADMIN_ERROR_HOMES and (rel, name) not in NOT_PULSAR_ERRORS
    )
    assert not again, (
        "Pulsar's admin error body decoded outside magnetar.client.admin.error_reason "
        "(use it, or AdminClient): " + "; ".join(again)
    )
    for rel, name in ADMIN_ERROR_HOMES:
        assert name in _admin_error_decoders((ROOT / rel).read_text()), (rel, name)


def test_the_admin_error_check_finds_the_shapes_the_copies_had() -> None:
    copies = [
        # the CLI's
        "def _reason(err):\n    return json.loads(err.read()).get('reason')\n",
        # the Spark source's
        "def _call(self):\n    reason = json.loads(text).get('reason', text)\n",
        # the broker's peers'
        "def raise_for(status, answer):\n    reason = answer.get('reason')\n",
        "def f(body):\n    return body['reason']\n",
    ]
    for sample in copies:
        assert _admin_error_decoders(sample), sample
    assert not _admin_error_decoders("def f():\n    return {'reason': 'x'}\n")
