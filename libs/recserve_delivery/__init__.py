"""Progressive delivery shared by the ranker's model rollout and the Envoy
service canary: the persisted state and its judge (``state``), the state
machine with its metrics (``rollout``), and its API form (``status``)."""
