"""The ranker service."""
