"""`python -m amazons.export`: the export's command line (`amazons.export.main`)."""

from amazons.export import main

raise SystemExit(main())
