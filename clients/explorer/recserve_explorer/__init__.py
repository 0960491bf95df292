"""The recommendation explorer: an example app backend on the Python client."""
