from mhainspect.cli import main

main()
