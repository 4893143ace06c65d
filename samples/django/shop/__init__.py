"""The shop app: orders, and the receipt task each order enqueues."""
