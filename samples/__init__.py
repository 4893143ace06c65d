"""Runnable samples for Caravel, installed with the project as ``caravel_samples``."""
