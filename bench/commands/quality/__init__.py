"""What the answers are: every user's list, live recall and NDCG, cold-start users."""
