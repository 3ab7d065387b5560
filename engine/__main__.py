"""``python -m privcube`` is the ``privcube`` command."""
import sys

from privcube.cli import main

sys.exit(main())
