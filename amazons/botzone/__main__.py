"""`python -m amazons.botzone`: the Python bot (`amazons.botzone.bot`)."""

from amazons.botzone.bot import main

raise SystemExit(main())
