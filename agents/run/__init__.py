"""A run: its record and state machine (record), how a plan executes (executor: DAG,
batches, gates, rollback), a listener's copy (mirror) and what faces show (results).
Nothing here touches Redis: the store sits above this package."""
