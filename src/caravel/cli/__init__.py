"""The ``caravel`` operator command line (Typer). A thin layer over the library's functions."""
