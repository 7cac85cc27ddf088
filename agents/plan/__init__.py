"""A plan as data: the model and its hash (model), what each step touches (targets), every
rule it must pass (validation), its DAG (graph), YAML in and out, diffs, dry runs, and
playbooks (requests that expand to plans without a model)."""
