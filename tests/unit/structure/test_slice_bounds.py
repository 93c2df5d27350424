"""A slice bound does its work once: a call with an effect inside ``x[a:b]`` fails here.

Why this test exists: mypyc (the compiler issue 24 tried on the hot paths, docs/benchmarks.md)
evaluates the bounds of a slice twice when the sliced object is not a list, tuple, str or bytes
(a memoryview, say): once for a specialised slice it then finds no match for, once for the
generic one. ``view = view[os.write(fd, view) :]`` in the entry log writer therefore wrote
every buffer twice once compiled, while the offsets counted it once, and the index pointed
into the middle of records. Interpreted Python evaluates a bound once, so only a rule on the
source keeps the two meanings the same: bind what a call returns to a name, then slice. This
reads every module under src/ and operator/ and names the slices whose bounds call anything
but the side-effect-free lookups below (or assign, await, yield).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PURE = frozenset({"len", "min", "max", "abs", "int", "index", "rindex", "find", "rfind"})
"""Functions and methods a bound may call: they read, they do not act."""
LEFT_ALONE = {
    ("src/magnetar/managed_ledger/memory.py", "lst.entries_in(lid)"): "a count read from the "
    "in-memory ledger list, used to slice a list (no second evaluation, and none would act)",
}


def _calls_in_bounds(text: str) -> list[tuple[int, str]]:
    """(line, bound) of every slice bound in ``text`` that calls something not in PURE (or
    assigns, awaits, yields)."""
    out = []
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.Slice):
            continue
        for bound in (node.lower, node.upper, node.step):
            if bound is None:
                continue
            for sub in ast.walk(bound):
                if isinstance(sub, ast.Call):
                    func = sub.func
                    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                    acts = name not in PURE
                else:  # an assignment, an await or a yield in a bound acts too
                    acts = isinstance(sub, ast.NamedExpr | ast.Await | ast.Yield | ast.YieldFrom)
                if acts:
                    out.append((node.lineno, ast.unparse(bound)))
                    break
    return out


def _offenders() -> list[str]:
    found = []
    for top in ("src", "operator"):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if "/_gen/" in rel:
                continue
            for line, bound in _calls_in_bounds(path.read_text()):
                if (rel, bound) not in LEFT_ALONE:
                    found.append(f"{rel}:{line}: {bound}")
    return found


def test_no_slice_bound_calls_something_that_acts() -> None:
    offenders = _offenders()
    assert not offenders, (
        "bind the call's result to a name before slicing (mypyc evaluates a slice bound "
        "twice on a memoryview):\n" + "\n".join(offenders)
    )


def test_the_rule_sees_the_construct_that_wrote_twice() -> None:
    assert _calls_in_bounds("view = view[os.write(fd, view) :]\n") == [(1, "os.write(fd, view)")]
    assert _calls_in_bounds("done = os.write(fd, view)\nview = view[done:]\n") == []
    assert _calls_in_bounds("x = v[: (n := n + 1)]\n") == [(1, "(n := (n + 1))")]
    assert _calls_in_bounds("head = data[: len(MAGIC)]\nx = s[s.rindex('-') + 1 :]\n") == []


def test_what_is_left_alone_is_still_there() -> None:
    for rel, bound in LEFT_ALONE:
        text = (ROOT / rel).read_text()
        assert bound in [b for _, b in _calls_in_bounds(text)], f"{rel}: {bound} is gone"
