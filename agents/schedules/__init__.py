"""Recurring plans: the Schedule model, cron and readable specs, DST rules (model)."""
