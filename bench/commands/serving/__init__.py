"""What the running stack does under load, seen from a client, its processes and its spans."""
