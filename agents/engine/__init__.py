"""What workers and replicas do with the store: consume the queue and own runs (worker:
leases, takeover, reconciler), write the record as a run goes (recorder), run a schedule's
occurrence (occurrences) and trim old runs (retention)."""
