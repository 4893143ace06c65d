"""``python -m caravel`` runs the operator command line."""

from caravel.cli.entry import main

main()
