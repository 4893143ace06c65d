"""Django management commands of the Caravel app."""
