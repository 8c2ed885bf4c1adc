"""`python -m amazons.arena`: the arena's command line (`amazons.arena.main`)."""

from amazons.arena import main

raise SystemExit(main())
