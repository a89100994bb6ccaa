from mhainspect.cli import run

run()
