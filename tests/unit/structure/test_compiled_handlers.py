"""No compiled module waits inside an ``except`` or a ``finally`` block.

Why this test exists: in a coroutine mypyc compiles, an exception that arrived through an
awaited future (a thread pool's result, a bookie's answer) and is then handled in an
``except`` block that itself awaits stays the thread's "exception being handled" for good,
even after the block re-raised and the caller caught it: ``sys.exc_info()`` keeps returning
it, ``logging.exception`` outside a handler prints it, and every exception raised later on
that thread carries it as ``__context__`` (a CI run showed a bookie's
StorageCorruptedError under an unrelated assertion, tests later). A ``finally`` block that
awaits leaves the propagating exception behind the same way, and while any such block waits,
the other tasks of the event loop see its exception as theirs. Interpreted Python does none
of this, so the rule is on the source of the modules scripts/native.py compiles: handle the
exception (record it), leave the block, then wait, then re-raise what was recorded. (An
``async with`` whose exit awaits does the same; the compiled modules use ``async with`` only
on asyncio's locks and timeouts, whose exits do not wait.)
tests/integration/bookie_storage/test_restart.py checks the case that was found.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _compiled_modules() -> tuple[str, ...]:
    spec = importlib.util.spec_from_file_location("native_build", ROOT / "scripts/native.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    modules: tuple[str, ...] = module.MODULES
    return modules


def _waits(nodes: list[ast.stmt]) -> list[int]:
    """Lines of the awaits (and async with/for) in ``nodes``, not counting nested functions
    (which run when called, not in the block)."""
    found = []
    todo: list[ast.AST] = list(nodes)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(node, ast.Await | ast.AsyncWith | ast.AsyncFor):
            found.append(node.lineno)
        todo.extend(ast.iter_child_nodes(node))
    return found


def _offenders_in(text: str) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ExceptHandler):
            out += [(line, "await in an except block") for line in _waits(node.body)]
        elif isinstance(node, ast.Try | ast.TryStar) and node.finalbody:
            out += [(line, "await in a finally block") for line in _waits(node.finalbody)]
    return sorted(out)


def test_the_rule_finds_both_shapes() -> None:
    text = (
        "async def f():\n"
        "    try:\n        await g()\n"
        "    except E:\n        await h()\n        raise\n"
        "    try:\n        pass\n"
        "    finally:\n        async with lock:\n            pass\n"
        "    try:\n        pass\n"
        "    except E:\n        async def later():\n            await h()\n"
    )
    assert _offenders_in(text) == [
        (5, "await in an except block"),
        (10, "await in a finally block"),
    ]


def test_no_compiled_module_waits_in_an_except_or_finally_block() -> None:
    found = []
    for rel in _compiled_modules():
        for line, what in _offenders_in((ROOT / "src" / rel).read_text()):
            found.append(f"src/{rel}:{line}: {what}")
    assert not found, "\n".join(found)
