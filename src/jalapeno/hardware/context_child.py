"""The child process of :func:`jalapeno.hardware.probe.context_steps_in_child`: ``python -m
jalapeno.hardware.context_child MODEL BUDGET_S`` times :func:`~jalapeno.hardware.probe.context_steps` at the served
shapes (:func:`~jalapeno.hardware.probe.served_shapes`) on a random-weight model of MODEL's shape and prints one JSON
line, ``[[batch, context, [seconds, ...]], ...]``."""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> int:
    from jalapeno.errors import JalapenoError
    from jalapeno.hardware.probe import context_steps, random_model, served_shapes
    from jalapeno.models.catalog import load_model

    if len(argv) != 2:
        print("usage: python -m jalapeno.hardware.context_child MODEL BUDGET_S", file=sys.stderr)
        return 2
    try:
        loaded = random_model(load_model(argv[0]), "cpu")
    except JalapenoError as exc:  # an unknown model, a family the backend does not build
        print(f"error: {exc}", file=sys.stderr)
        return 1
    got = context_steps(loaded, float(argv[1]), shapes=served_shapes())
    print(json.dumps([[b, c, v] for (b, c), v in got.items()]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
