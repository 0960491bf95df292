"""Nightly batch re-scoring on Apache Spark.

Every user is scored against their retrieval candidates by the versioned
ranking model; the per-user top-N lists become precomputed recommendations
(and each user's own fallback), published atomically into the Feast online
store after validation gates pass. See ``job``, ``gates`` and ``publish``.
"""
