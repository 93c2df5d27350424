"""Every retry in src/magnetar waits a delay drawn from the shared, jittered backoff.

Why this test exists: brokers, bookies and clients lose etcd, a bookie or a broker at the
same moment, and a loop that waits a fixed (or plainly doubling) delay before trying again
brings them all back at the same instants (``tests/unit/common/test_backoff.py`` measures
that). This test reads every module under src/magnetar and fails naming the line when a
sleep in an exception handler, or in a loop bounded by attempts, waits anything other than
a delay from ``magnetar.common.backoff.Backoff.next()``.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "src" / "magnetar"


def _is_sleep(node: ast.AST) -> ast.expr | None:
    """The delay argument of ``asyncio.sleep(x)`` / ``time.sleep(x)``, else None."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "sleep"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id in {"asyncio", "time"}
        and node.args
    ):
        return node.args[0]
    return None


def _from_backoff(delay: ast.expr, backoff_names: set[str]) -> bool:
    if isinstance(delay, ast.Constant) and delay.value == 0:
        return True  # a yield to the loop, not a wait
    if isinstance(delay, ast.Call) and isinstance(delay.func, ast.Attribute):
        return delay.func.attr == "next"
    return isinstance(delay, ast.Name) and delay.id in backoff_names


def _names_from_next(function: ast.AST) -> set[str]:
    """Names assigned ``<something>.next()`` in the function."""
    names = set()
    for node in ast.walk(function):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute)
            and node.value.func.attr == "next"
        ):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def _retry_regions(function: ast.AST) -> list[ast.AST]:
    """Exception handlers, and loops over ``range(...attempts...)``: where a wait is a retry."""
    regions: list[ast.AST] = []
    for node in ast.walk(function):
        if isinstance(node, ast.ExceptHandler):
            regions.append(node)
        elif (
            isinstance(node, ast.For)
            and isinstance(node.target, ast.Name)
            and "attempt" in node.target.id
        ):
            regions.append(node)
    return regions


def _fixed_retry_waits() -> list[str]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            backoff_names = _names_from_next(function)
            for region in _retry_regions(function):
                for node in ast.walk(region):
                    delay = _is_sleep(node)
                    if delay is not None and not _from_backoff(delay, backoff_names):
                        where = path.relative_to(SRC.parent)
                        found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return sorted(set(found))


def test_every_retry_waits_a_jittered_backoff() -> None:
    assert _fixed_retry_waits() == []
