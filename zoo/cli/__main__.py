"""``python -m zoo.cli``: the ``zoo`` command without its console script (tests, torchrun)."""

from zoo.cli import main

main()
