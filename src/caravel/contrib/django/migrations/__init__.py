"""Django migrations of the Caravel app: one, delegating to Caravel's own."""
