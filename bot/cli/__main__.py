"""``python -m bot.cli``: the same as the ``deckhand`` command."""

import sys

from bot.cli import main

sys.exit(main())
