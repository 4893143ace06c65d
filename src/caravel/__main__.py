"""``python -m caravel`` runs the operator command line."""

from caravel.cli.main import main

main()
