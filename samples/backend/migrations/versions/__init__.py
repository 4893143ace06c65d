"""The backend's revisions: 0001 accounts, sessions and notes; 0002 counter results."""
