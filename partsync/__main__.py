from partsync.cli import main

main()
