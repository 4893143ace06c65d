"""Integrations with frameworks; nothing in the core imports them."""
