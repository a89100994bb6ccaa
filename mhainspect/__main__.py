"""``python -m mhainspect``; ``main`` is also the console script's entry point."""

from mhainspect.cli.app import run


def main() -> None:
    run()


if __name__ == "__main__":
    main()
