"""What was deployed where: deploys and DORA figures (deploys), asking hosts (verify), and
how long runs and history are kept (retention settings)."""
