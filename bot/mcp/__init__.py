"""``deckhand mcp``: deckhand as an MCP server that agents can use but never approve through.

``views`` holds the pydantic models tools return (their schemas are the tools' output
schemas), ``desk`` does the work synchronously over the store, like every other face, and
``server`` exposes it through the official SDK over stdio or streamable HTTP (``auth``:
bearer tokens). Only this package runs asyncio; the desk is reached through worker threads.
"""
