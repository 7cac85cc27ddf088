"""Requests in people's words, planned without a model: how a request is read (phrasing:
filler, versions, environment aliases, typed captures), playbooks (patterns that expand to
plans), explicit values (``-e key=value``) and, when nothing matches, the closest runnable
requests (suggest)."""
