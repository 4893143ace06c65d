"""caravel.contrib.django against Django's own documentation of the Tasks API."""
