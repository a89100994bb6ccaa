"""``python -m mhainspect``; ``main`` is also fit to be the console script's entry point."""

import gc


def main() -> None:
    """A whole process: the collector goes off before the CLI's imports, not after them.

    ``cli.run`` turns it off for a one-model run anyway (and back on for many models); turned off
    here, the collections that importing typer and the analysis would trigger (each walking every
    object the imports created, all of which stay alive) do not happen either.
    """
    gc.disable()
    from mhainspect.cli.app import run

    run()


if __name__ == "__main__":
    main()
