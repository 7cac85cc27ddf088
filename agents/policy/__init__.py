"""Who may do what: the rules as data (rules), freeze windows and break-glass (freeze), and
how they apply to a run (approvals)."""
