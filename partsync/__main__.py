from partsync.ui.cli import main

main()
