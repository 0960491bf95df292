"""The features service."""
