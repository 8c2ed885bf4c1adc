"""`python -m amazons.train`: the main job (`amazons.train.run.main`)."""

from amazons.train.run import main

raise SystemExit(main())
