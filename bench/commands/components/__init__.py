"""One component at a time, beside the stack: features, ranker, retriever,
re-scoring, shadow scoring."""
