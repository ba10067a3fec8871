"""``python -m fedbalance``: see ``fedbalance.cli``."""

from fedbalance.cli import main

raise SystemExit(main())
