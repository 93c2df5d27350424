"""``python -m magnetar_operator``: run the operator with kopf (what the image's entrypoint runs).

Equivalent to ``kopf run -m magnetar_operator.handlers``; the namespace scope comes from
``--namespace``/``--all-namespaces`` arguments passed through to kopf.
"""

from __future__ import annotations

import sys

from kopf.cli import main as kopf_main


def main() -> None:
    """Run ``kopf run --standalone -m magnetar_operator.handlers <args>``."""
    args = sys.argv[1:] or ["--all-namespaces"]
    sys.argv = ["kopf", "run", "--standalone", "-m", "magnetar_operator.handlers", *args]
    kopf_main()


if __name__ == "__main__":
    main()
